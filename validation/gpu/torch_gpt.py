#!/usr/bin/env python3
"""PyTorch on the GPU: GPT-2 (pre-LN, GELU-tanh, tied embeddings, learned positions; the model of
llmtrain) trained with bf16 autocast and fused AdamW, eager or torch.compile; prints one JSON line
{"model", "mode", "tokens_per_s", "step_ms", "mfu", "peak_tflops"}: the median over the steps after
--warmup. MFU = (6 N + 12 L T C) tokens/s / peak (the PaLM count: N non-embedding-position params,
attention's T x T products included), peak 989.4e12 (H100/H200 SXM dense bf16) unless --peak.
--device cpu: the same on the CPU (run.sh's rehearsal on a build machine; a torch older than 2.0,
as Debian's 1.13, gets the attention written out and no torch.compile).
usage: torch_gpt.py --layers 12 --d-model 768 --heads 12 [--seq 1024 --batch 8 --steps 20 --compile]
"""
import argparse, json, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v):
    """Causal attention: PyTorch's fused kernel where it exists (2.0 and later), else written out."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.mproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, d in (("layers", 12), ("d-model", 768), ("heads", 12), ("vocab", 50304), ("seq", 1024),
                 ("batch", 8), ("steps", 20), ("warmup", 5)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak", type=float, default=989.4e12)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = a.device
    if a.compile and not hasattr(torch, "compile"):
        raise SystemExit(f"torch.compile: not in torch {torch.__version__}")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(a.layers, a.d_model, a.heads, a.vocab, a.seq).to(dev)
    fused = {"fused": True} if dev == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, **fused)
    step_fn = torch.compile(model) if a.compile else model
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    times = []
    for s in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    step = statistics.median(times)
    tok_s = a.batch * a.seq / step
    flop_per_tok = 6 * n_params + 12 * a.layers * a.seq * a.d_model
    print(json.dumps({"model": f"{a.layers}L{a.d_model}", "mode": "compile" if a.compile else "eager",
                      "tokens_per_s": round(tok_s), "step_ms": round(step * 1e3, 2),
                      "mfu": round(tok_s * flop_per_tok / a.peak, 4), "peak_tflops": a.peak / 1e12,
                      "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
