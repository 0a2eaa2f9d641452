#!/usr/bin/env python3
"""PyTorch reference for llmtrain's Llama-family options (float64, written independently of the
C code): RMSNorm, rotary embeddings (rotate-half, as Hugging Face Llama), SwiGLU, grouped-query
attention, untied LM head, no biases, and any mix of them with the GPT-2 pieces; also Qwen 2's
q/k/v biases (&model qkv_bias) and Llama 3.1's RoPE frequencies (&model rope_scaling = 'llama3',
written here from Meta's apply_scaling / Hugging Face's _compute_llama3_parameters, in float64).

The same checks as gpt_reference.py (whose namelist reader, data loader, LR schedule and
AdamW loop it uses): step-0 loss rel. <= 1e-5, every step-0 gradient rel. L2 <= 1e-4, the
losses and gradient norms of N AdamW steps rel. <= 1e-4, against llmtrain's dump / metrics.

usage: llama_reference.py --nml input.nml --dump DIR [--metrics metrics.jsonl]
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference as ref  # noqa: E402

LLAMA = {"norm": "rmsnorm", "pos": "rope", "mlp": "swiglu", "tie_embeddings": False, "bias": False}
GPT2 = {"norm": "layernorm", "pos": "learned", "mlp": "gelu", "tie_embeddings": True, "bias": True}


def arch_of(m):
    """The switches as llmtrain resolves them: arch's defaults, a key given explicitly wins."""
    base = LLAMA if str(m.get("arch", "gpt2")).lower() == "llama" else GPT2
    a = {k: m.get(k, v) for k, v in base.items()}
    a["norm_eps"] = float(m.get("norm_eps", 1e-5))
    a["rope_theta"] = float(m.get("rope_theta", 10000.0))
    a["n_kv_head"] = int(m.get("n_kv_head", 0)) or int(m["n_head"])
    a["qkv_bias"] = bool(m.get("qkv_bias", False)) or bool(a["bias"])
    a["rope_scaling"] = str(m.get("rope_scaling", "none")).lower()
    for k, d in (("rope_scaling_factor", 8.0), ("rope_low_freq_factor", 1.0), ("rope_high_freq_factor", 4.0),
                 ("rope_original_max_positions", 8192)):
        a[k] = float(m.get(k, d))
    return a


def inv_freq(a, hs):
    """RoPE's inverse frequencies theta^(-2i/hs); with rope_scaling = 'llama3' the low frequencies
    (wavelength > L / low_freq_factor) divided by factor, the high ones (wavelength < L /
    high_freq_factor) kept, and between them (1 - s) inv / factor + s inv with s = (L / wavelength
    - low_freq_factor) / (high_freq_factor - low_freq_factor), L = original_max_positions."""
    inv = 1.0 / a["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    if a["rope_scaling"] != "llama3":
        return inv
    L, f, lo, hi = (a[k] for k in ("rope_original_max_positions", "rope_scaling_factor",
                                   "rope_low_freq_factor", "rope_high_freq_factor"))
    wl = 2 * math.pi / inv
    s = (L / wl - lo) / (hi - lo)
    mid = (1 - s) * inv / f + s * inv
    return torch.where(wl < L / hi, inv, torch.where(wl > L / lo, inv / f, mid))


def norm(x, P, name, a):
    C = x.shape[-1]
    if a["norm"] == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a["norm_eps"]) * P[name + ".w"]
    return F.layer_norm(x, (C,), P[name + ".w"], P[name + ".b"], eps=1e-5)


def linear(h, P, name):
    y = h @ P[name + ".w"].T
    return y + P[name + ".b"] if name + ".b" in P else y


def rope(x, a):
    """x [B, NH, T, hs]: Hugging Face's apply_rotary_pos_emb (rotate_half), angles in float64."""
    T, hs = x.shape[-2], x.shape[-1]
    inv = inv_freq(a, hs)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((ang, ang), dim=-1)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def ffn(h, P, name, a, e=None):
    """The MLP with tensors name.fc/gate/up/proj (.w, .b if present); e: expert e of 3-D [E, ...]
    tensors."""
    def lin(x, n):
        w, b = P[name + n + ".w"], P.get(name + n + ".b")
        w, b = (w, b) if e is None else (w[e], None if b is None else b[e])
        return x @ w.T if b is None else x @ w.T + b
    if a["mlp"] == "swiglu":
        h = F.silu(lin(h, ".gate")) * lin(h, ".up")
    else:
        h = F.gelu(lin(h, ".fc"), approximate="tanh")
    return lin(h, ".proj")


def model_loss(P, idx, targets, L, NH, V, a, mlp=None):
    """Mean cross-entropy; mlp(h, l), if given, is block l's MLP on h = ln2(x) (default: the dense
    h.l.mlp.*)."""
    B, T = idx.shape
    C = P["wte"].shape[1]
    hs, KV = C // NH, a["n_kv_head"]
    x = P["wte"][idx]
    if a["pos"] == "learned":
        x = x + P["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        pre = "h.%d." % l
        h = norm(x, P, pre + "ln1", a)
        if pre + "attn.qkv.w" in P:
            q, k, v = linear(h, P, pre + "attn.qkv").split(C, dim=-1)
        else:
            q, k, v = (linear(h, P, pre + "attn." + n) for n in "qkv")
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k, v = (t.view(B, T, KV, hs).transpose(1, 2) for t in (k, v))
        if a["pos"] == "rope":
            q, k = rope(q, a), rope(k, a)
        k, v = (t.repeat_interleave(NH // KV, dim=1) for t in (k, v))  # HF's repeat_kv
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, P, pre + "attn.proj")
        h = norm(x, P, pre + "ln2", a)
        x = x + (mlp(h, l) if mlp else ffn(h, P, pre + "mlp", a))
    x = norm(x, P, "lnf", a)
    logits = x @ (P["lm_head.w"] if "lm_head.w" in P else P["wte"]).T
    logits[..., V:] = float("-inf")  # vocabulary padding is masked out
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def expected_names(m, a):
    """The registry names llmtrain must have written for these switches (docs/model.md's tensor table)."""
    L = int(m["n_layer"])
    names = {"wte", "lnf.w"} | ({"wpe"} if a["pos"] == "learned" else set())
    names |= {"lnf.b"} if a["norm"] == "layernorm" else set()
    names |= set() if a["tie_embeddings"] else {"lm_head.w"}
    fused = a["n_kv_head"] == int(m["n_head"]) and a["pos"] == "learned"
    lin = (["attn.qkv"] if fused else ["attn.q", "attn.k", "attn.v"]) + ["attn.proj"]
    lin += (["mlp.gate", "mlp.up"] if a["mlp"] == "swiglu" else ["mlp.fc"]) + ["mlp.proj"]
    for l in range(L):
        for n in lin:
            names.add("h.%d.%s.w" % (l, n))
            if a["bias"] or (a["qkv_bias"] and n in ("attn.qkv", "attn.q", "attn.k", "attn.v")):
                names.add("h.%d.%s.b" % (l, n))
        for n in ("ln1", "ln2"):
            names.add("h.%d.%s.w" % (l, n))
            if a["norm"] == "layernorm":
                names.add("h.%d.%s.b" % (l, n))
    return names


def main():
    nml_path = sys.argv[sys.argv.index("--nml") + 1]
    dump = sys.argv[sys.argv.index("--dump") + 1]
    m = ref.read_namelist(nml_path)["model"]
    a = arch_of(m)
    have = set(ref.read_h5(dump + "/weights.h5"))
    want = expected_names(m, a)
    if have != want:
        print("tensor names differ from docs/model.md's table: extra %s, missing %s"
              % (sorted(have - want), sorted(want - have)))
        print("FAIL")
        return 1
    print("tensor names: %d, as docs/model.md's table says for %s" % (len(have), a))
    ref.gpt_loss = lambda P, idx, targets, L, NH, V: model_loss(P, idx, targets, L, NH, V, a)
    return ref.main()


if __name__ == "__main__":
    sys.exit(main())
