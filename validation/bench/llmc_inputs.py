#!/usr/bin/env python3
"""llmc_inputs.py — the files llm.c's train_gpt2.c reads, for `make bench`'s comparison with it.

    llmc_inputs.py SHARD OUTDIR VERSION

train_gpt2.c (github.com/karpathy/llm.c, the CPU reference trainer) takes no arguments: it reads
gpt2_124M.bin and the Tiny Shakespeare token files from its working directory. This writes them
into OUTDIR, from this project's own data and a random initialisation, so the comparison needs no
download:
  - gpt2_124M.bin: llm.c's model file (256 int32 header: magic 20240326, VERSION, max_seq_len
    1024, vocab 50257, 12 layers, 12 heads, 768 channels, and for version 3 the padded vocab
    50304; then every parameter as float32 in llm.c's order: wte, wpe, ln1w, ln1b, qkvw, qkvb,
    attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb), weights N(0, 0.02),
    norms' weights 1, biases 0 (the time of a step does not depend on the values);
  - the train and val tokens in both layouts llm.c has used: version 3's
    dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (the 256 int32 header of llm.c's
    shards, magic 20240520, then uint16 tokens: SHARD's ids, read from a version-1 (uint16) or
    version-2 (uint32, all below 65536) shard), and version 1's
    data/tiny_shakespeare_{train,val}.bin (raw int32 tokens).
VERSION is 3 for a train_gpt2.c that checks `model_header[1] != 3`, else 1 (run_bench.sh looks).
"""
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("1", "3"):
        sys.exit("usage: llmc_inputs.py SHARD OUTDIR VERSION(1|3)")
    shard, out, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
    maxT, V, L, NH, C = 1024, 50257, 12, 12, 768
    Vp = 50304 if version == 3 else V
    header = np.zeros(256, np.int32)
    header[:7] = [20240326, version, maxT, V, L, NH, C]
    if version == 3:
        header[7] = Vp
    rng = np.random.default_rng(0)
    shapes = [("wte", (Vp, C), "w"), ("wpe", (maxT, C), "w"), ("ln1w", (L, C), "one"),
              ("ln1b", (L, C), "zero"), ("qkvw", (L, 3 * C, C), "w"), ("qkvb", (L, 3 * C), "zero"),
              ("attprojw", (L, C, C), "w"), ("attprojb", (L, C), "zero"), ("ln2w", (L, C), "one"),
              ("ln2b", (L, C), "zero"), ("fcw", (L, 4 * C, C), "w"), ("fcb", (L, 4 * C), "zero"),
              ("fcprojw", (L, C, 4 * C), "w"), ("fcprojb", (L, C), "zero"), ("lnfw", (C,), "one"),
              ("lnfb", (C,), "zero")]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gpt2_124M.bin"), "wb") as f:
        f.write(header.tobytes())
        for _, shape, kind in shapes:
            if kind == "w":
                a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
            else:
                a = np.full(shape, 1.0 if kind == "one" else 0.0, np.float32)
            f.write(a.tobytes())
    raw = open(shard, "rb").read()
    h = np.frombuffer(raw[:1024], np.int32)
    if h[0] != 20240520:
        sys.exit("llmc_inputs.py: %s is not an llm.c token shard (magic %d)" % (shard, h[0]))
    if h[1] not in (1, 2):
        sys.exit("llmc_inputs.py: %s: shard version %d (1: uint16 ids, 2: uint32 ids)" % (shard, h[1]))
    ids = np.uint16 if h[1] == 1 else np.uint32  # version 2: llm.c's Llama 3 shards
    tokens = np.frombuffer(raw[1024:1024 + np.dtype(ids).itemsize * int(h[2])], ids)
    if tokens.size and int(tokens.max()) > 65535:
        sys.exit("llmc_inputs.py: %s holds id %d: train_gpt2.c reads uint16 ids" % (shard, int(tokens.max())))
    tokens = tokens.astype(np.uint16)
    n_val = min(len(tokens) // 10, 65536)
    parts = {"val": tokens[:n_val], "train": tokens[n_val:]}
    for d in ("dev/data/tinyshakespeare", "data"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    for split, t in parts.items():
        hh = np.zeros(256, np.int32)
        hh[:3] = [20240520, 1, len(t)]
        with open(os.path.join(out, "dev/data/tinyshakespeare/tiny_shakespeare_%s.bin" % split), "wb") as f:
            f.write(hh.tobytes() + t.tobytes())
        with open(os.path.join(out, "data/tiny_shakespeare_%s.bin" % split), "wb") as f:
            f.write(t.astype(np.int32).tobytes())


if __name__ == "__main__":
    main()
