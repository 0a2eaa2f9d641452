#!/usr/bin/env python3
"""PyTorch CPU baseline for `make bench`: the same GPT-2 architecture, initialisation, batch and
optimizer as llmtrain (eager, AdamW with decay groups, grad clipping), on the same number of
threads.
--dtype fp32 (default): everything in fp32; --dtype bf16: forward and loss under
torch.autocast('cpu', dtype=torch.bfloat16) (bf16 matrix products, fp32 parameters, gradients and
AdamW: PyTorch's own mixed precision, the counterpart of llmtrain's &train precision = 'bf16').
Prints one JSON line: {"tokens_per_s": median, "step_ms": median, "fastest_tokens_per_s",
"minor_faults_per_step": median (getrusage of this process), ...}; medians and the fastest step
over the steps after the --warmup first ones (default: 2 of more than 4 steps, else 1).

usage: torch_gpt.py --layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 64 --batch 4
                    [--steps 12] [--warmup N] [--threads 2] [--dtype fp32|bf16]
"""
import argparse
import contextlib
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.mproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        Vp = (V + 127) // 128 * 128
        self.V = V
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        self.init_like_llmtrain(L, V)

    @torch.no_grad()
    def init_like_llmtrain(self, L, V):
        """GPT-2's initialisation, as llmtrain's (model/params.c): weights N(0, 0.02), the two
        residual projections N(0, 0.02 / sqrt(2 L)), biases 0, padding rows of wte 0. PyTorch's
        defaults (nn.Embedding N(0, 1), tied to the head) start at a loss near 110 instead of
        ln(V) and fill the backward with denormal numbers, which made fp32 steps 2-3x slower."""
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith(("proj.weight", "mproj.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)
            elif name.endswith(".bias"):  # linear biases; layernorm's are 0 already
                nn.init.zeros_(p)
        self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.T
        logits[..., self.V:] = float("-inf")
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, d in [("layers", 12), ("d-model", 768), ("heads", 12), ("vocab", 50257), ("seq", 64),
                 ("batch", 4), ("steps", 12), ("threads", 2)]:
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args()
    if a.warmup is None:
        a.warmup = 2 if a.steps > 4 else 1 if a.steps > 1 else 0
    if not 0 <= a.warmup < a.steps:
        ap.error("--warmup must be at least 0 and less than --steps")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.layers, a.d_model, a.heads, a.vocab, a.seq)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(1)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.dtype == "bf16" \
        else contextlib.nullcontext
    times, faults = [], []
    for step in range(a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    steady = slice(a.warmup, None)
    ms = statistics.median(times[steady]) * 1e3
    print(json.dumps({"step_ms": ms, "tokens_per_s": a.batch * a.seq / (ms / 1e3),
                      "fastest_tokens_per_s": a.batch * a.seq / min(times[steady]),
                      "minor_faults_per_step": statistics.median(faults[steady]),
                      "dtype": a.dtype, "torch": torch.__version__, "threads": a.threads,
                      "loss": loss.item()}))


if __name__ == "__main__":
    main()
