#!/usr/bin/env python3
"""Write llm.c-format token shards of a synthetic language for tests and the tiny example.

The language is a sparse Markov chain: each token has `fanout` possible successors with fixed
probabilities, so a model can learn it (the loss falls from ln(vocab) towards the chain's
entropy) while the data stays deterministic for a seed. The shard format is llm.c's: 256 int32
header (magic 20240520, version 1, token count), then uint16 tokens.

usage: make_synthetic_shards.py OUT_DIR [--vocab 500] [--train-tokens 200000]
                                [--val-tokens 20000] [--shards 2] [--seed 1]
"""
import argparse
import os

import numpy as np

MAGIC, VERSION = 20240520, 1


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())
    os.replace(tmp, path)


def markov_tokens(rng, vocab, n, fanout=4):
    succ = rng.integers(0, vocab, size=(vocab, fanout))
    probs = rng.dirichlet(np.ones(fanout), size=vocab).cumsum(axis=1)
    u = rng.random(n)
    out = np.empty(n, dtype=np.int64)
    t = int(rng.integers(0, vocab))
    for i in range(n):
        t = int(succ[t, np.searchsorted(probs[t], u[i])])
        out[i] = t
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--vocab", type=int, default=500)
    ap.add_argument("--train-tokens", type=int, default=200000)
    ap.add_argument("--val-tokens", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    toks = markov_tokens(rng, a.vocab, a.train_tokens + a.val_tokens)
    train, val = toks[: a.train_tokens], toks[a.train_tokens:]
    for i, part in enumerate(np.array_split(train, a.shards)):
        write_shard(os.path.join(a.out_dir, "train_%03d.bin" % i), part)
    write_shard(os.path.join(a.out_dir, "val_000.bin"), val)
    print("wrote %d train shards (%d tokens) and 1 val shard (%d tokens) to %s"
          % (a.shards, len(train), len(val), a.out_dir))


if __name__ == "__main__":
    main()
