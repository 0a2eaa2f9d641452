#!/usr/bin/env python3
"""PyTorch reference for llmtrain's GPT (float64, written independently of the C code).

Reads the step-0 weights that llmtrain wrote (HDF5, /model/<name> in global shapes), the same
token shards and the same namelist, then checks:
  1. the step-0 loss               rel. error <= 1e-5
  2. every parameter's gradient    rel. L2 error <= 1e-4
  3. the losses and gradient norms of N AdamW steps   rel. error <= 1e-4 each (from llmtrain's
     metrics.jsonl; the norm is the one clipping uses, before clipping)
Prints a table of what it compared and exits 1 on any violation.

usage: gpt_reference.py --nml input.nml --dump DIR [--metrics metrics.jsonl]
  DIR holds weights.h5, grads.h5, loss.txt written by build/ref/gpt_dump.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "tools"))
import nml as nml_reader  # noqa: E402  (llmtrain's namelist reader)

torch.set_default_dtype(torch.float64)

# ---------------------------------------------------------------- namelist (the tools' reader)
def read_namelist(path):
    """Groups -> {key: value or list}, read by src/tools/nml.py (llmtrain's grammar)."""
    return nml_reader.namelist_dict(nml_reader.read_namelist_file(path))


def setting(nml, group, key, default):
    return nml.get(group, {}).get(key, default)


# ---------------------------------------------------------------- data: llm.c shards
def load_windows(pattern, T):
    """All windows of T+1 tokens at multiples of T, shard after shard, in sampler order."""
    files = sorted(set(f for p in re.split(r"[\s,]+", pattern.strip()) for f in glob.glob(p)))
    windows = []
    for f in files:
        head = np.fromfile(f, dtype=np.int32, count=256)
        assert head[0] == 20240520 and head[1] in (1, 2), f  # version 2: uint32 ids
        ids = np.uint16 if head[1] == 1 else np.uint32
        toks = np.fromfile(f, dtype=ids, offset=1024).astype(np.int64)
        assert len(toks) == head[2], f
        for j in range((len(toks) - 1) // T):
            windows.append(toks[j * T: j * T + T + 1])
    return windows


def batch(windows, first, count):
    w = np.stack([windows[(first + i) % len(windows)] for i in range(count)])
    return torch.from_numpy(w[:, :-1]), torch.from_numpy(w[:, 1:])


# ---------------------------------------------------------------- model
def gpt_loss(P, idx, targets, L, NH, V):
    B, T = idx.shape
    C = P["wte"].shape[1]
    hs = C // NH
    x = P["wte"][idx] + P["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = lambda n: P["h.%d.%s" % (l, n)]
        h = F.layer_norm(x, (C,), p("ln1.w"), p("ln1.b"), eps=1e-5)
        q, k, v = (h @ p("attn.qkv.w").T + p("attn.qkv.b")).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.proj.w").T + p("attn.proj.b")
        h = F.layer_norm(x, (C,), p("ln2.w"), p("ln2.b"), eps=1e-5)
        h = F.gelu(h @ p("mlp.fc.w").T + p("mlp.fc.b"), approximate="tanh")
        x = x + h @ p("mlp.proj.w").T + p("mlp.proj.b")
    x = F.layer_norm(x, (C,), P["lnf.w"], P["lnf.b"], eps=1e-5)
    logits = x @ P["wte"].T
    logits[..., V:] = float("-inf")  # vocabulary padding is masked out
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def lr_at(s, step, max_steps):
    lr, min_lr, warm = s["lr"], s["min_lr"], s["warmup_steps"]
    if step < warm:
        return lr * (step + 1) / warm
    sched = s["lr_schedule"]
    if sched == "constant":
        return lr
    p = min(max((step - warm) / (max_steps - warm), 0.0), 1.0) if max_steps > warm else 1.0
    if sched == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))
    if sched == "linear":
        return lr + (min_lr - lr) * p
    start = max_steps * (1 - s["decay_fraction"])  # wsd
    if step < start:
        return lr
    return lr + (min_lr - lr) * min(max((step - start) / (max_steps - start), 0.0), 1.0)


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {n: torch.from_numpy(np.array(f["model"][n], dtype=np.float64)) for n in f["model"]}


def rel(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nml", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--metrics")
    a = ap.parse_args()
    nml = read_namelist(a.nml)
    m, t = nml["model"], nml.get("train", {})
    L, NH, V, T = m["n_layer"], m["n_head"], m["vocab_size"], m["seq_len"]
    sch = {k: setting(nml, "train", k, d) for k, d in
           [("lr", 6e-4), ("min_lr", 0.0), ("warmup_steps", 0), ("lr_schedule", "cosine"),
            ("decay_fraction", 0.2)]}
    B = t.get("micro_batch", 4)
    G = t.get("global_batch", 0) or B
    windows = load_windows(nml["data"]["train_files"], T)
    ok = True

    P = {n: w.clone().requires_grad_(True) for n, w in read_h5(a.dump + "/weights.h5").items()}
    x, y = batch(windows, 0, G)
    loss = gpt_loss(P, x, y, L, NH, V)
    loss.backward()
    c_loss = float(open(a.dump + "/loss.txt").read())
    e = abs(c_loss - loss.item()) / abs(loss.item())
    ok &= e <= 1e-5
    print("step-0 loss: llmtrain %.9f  pytorch %.9f  rel.err %.2e  (tol 1e-5) %s"
          % (c_loss, loss.item(), e, "ok" if e <= 1e-5 else "FAIL"))
    G_c = read_h5(a.dump + "/grads.h5")
    worst = ("", 0.0)
    for n, p in P.items():
        e = rel(G_c[n], p.grad)
        worst = max(worst, (n, e), key=lambda z: z[1])
        if e > 1e-4:
            ok = False
            print("  gradient %-22s rel.L2 err %.2e  (tol 1e-4) FAIL" % (n, e))
    print("step-0 gradients: %d tensors, worst rel.L2 error %.2e (%s)  (tol 1e-4) %s"
          % (len(P), worst[1], worst[0], "ok" if worst[1] <= 1e-4 else "FAIL"))

    if a.metrics:
        steps = [json.loads(l) for l in open(a.metrics) if '"loss"' in l]
        n = len(steps)
        max_steps = setting(nml, "train", "max_steps", 100)
        wd, clip = setting(nml, "train", "weight_decay", 0.1), setting(nml, "train", "grad_clip", 1.0)
        P = {k: w.detach().clone().requires_grad_(True) for k, w in read_h5(a.dump + "/weights.h5").items()}
        # weight decay on matrices and embeddings, not on biases and norm weights
        decay = [p for k, p in P.items() if k in ("wte", "wpe")
                 or (k.endswith(".w") and not k.split(".")[-2].startswith("ln"))]
        rest = [p for p in P.values() if all(p is not q for q in decay)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=sch["lr"], betas=(setting(nml, "train", "beta1", 0.9),
                                                     setting(nml, "train", "beta2", 0.95)),
                                eps=setting(nml, "train", "eps", 1e-8))
        worst = worst_norm = 0.0
        for s in range(n):
            x, y = batch(windows, s * G, G)
            opt.zero_grad()
            loss = gpt_loss(P, x, y, L, NH, V)
            loss.backward()
            norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in P.values()))
            if clip > 0 and norm > clip:
                for p in P.values():
                    p.grad.mul_(clip / norm)
            for g in opt.param_groups:
                g["lr"] = lr_at(sch, s, max_steps)
            opt.step()
            e = abs(steps[s]["loss"] - loss.item()) / abs(loss.item())
            en = abs(steps[s]["grad_norm"] - norm) / norm
            worst = max(worst, e)
            worst_norm = max(worst_norm, en)
            print("  step %2d: loss llmtrain %.7f pytorch %.7f rel.err %.2e | grad norm %.7f vs "
                  "%.7f rel.err %.2e" % (s + 1, steps[s]["loss"], loss.item(), e,
                                         steps[s]["grad_norm"], norm, en))
        ok &= worst <= 1e-4 and worst_norm <= 1e-4 and n > 0
        print("%d AdamW steps: worst loss rel.err %.2e, worst gradient-norm rel.err %.2e  (tol 1e-4) %s"
              % (n, worst, worst_norm, "ok" if worst <= 1e-4 and worst_norm <= 1e-4 and n > 0 else "FAIL"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
