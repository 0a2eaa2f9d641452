#!/usr/bin/env python3
"""The independent reference of llmmerge's methods, and helpers for its tests.

Reference: mergekit's own merge kernels (mergekit 0.1.5, installed by validation/deps.sh into
.deps/python without its dependencies: mergekit needs torch >= 2 and transformers >= 5, which do
not install beside Debian's torch 1.13, but its kernels run on torch 1.13):
  linear           mergekit.merge_methods.linear.linear_merge.implementation
  slerp            mergekit.merge_methods.slerp.slerp
  task_arithmetic, ties, dare_linear, dare_ties
                   GeneralizedTaskArithmeticMerge.merge_group (mergekit.merge_methods.registry)
mergekit's whole pipeline (merge_tensors) stops on torch 1.13 (torch.dtype.itemsize, 2.1), so
the kernels are called directly. DARE's masks: mergekit draws them with torch.bernoulli; here
torch.bernoulli is replaced, for the call, by llmmerge's Philox masks (reimplemented below in
numpy from core/rng.c and tools/merge_methods.c), so both sides drop the same entries and the
rest (rescale, sign election, sums) is mergekit's. The classic 1/density rescale is mergekit
0.0.5's bernoulli(rescale=True): tensor * mask / density.
Without mergekit (no PyPI), a numpy implementation of the same definitions is used instead
(REFERENCE says which).

usage (as a module): import merge_reference as mr; mr.merge(...), mr.read_model(path), ...
"""
import os
import sys

import numpy as np

try:
    import torch
    from mergekit.merge_methods import linear as mk_linear
    from mergekit.merge_methods import registry as mk_registry
    from mergekit.merge_methods import slerp as mk_slerp
    from mergekit.merge_methods.base import TensorGroup
    import mergekit.sparsify as mk_sparsify
    import importlib.metadata as _md
    REFERENCE = "mergekit %s kernels (torch %s)" % (_md.version("mergekit"), torch.__version__)
except Exception as e:  # noqa: BLE001 - any import problem means: no mergekit here
    torch = None
    REFERENCE = "numpy from mergekit's definitions (mergekit not importable: %s)" % type(e).__name__

M64 = (1 << 64) - 1

# ---- llmtrain's checksum and Philox (core/rng.c, io/checkpoint.c) ------------------------------


def checksum(x):
    """sum mod 2^64 of mix64(index * golden ^ (bits << 17) ^ bits), as ckpt_tensor_checksum."""
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    j = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        v = (j * np.uint64(0x9E3779B97F4A7C15)) ^ (bits << np.uint64(17)) ^ bits
        v ^= v >> np.uint64(30)
        v *= np.uint64(0xBF58476D1CE4E5B9)
        v ^= v >> np.uint64(27)
        v *= np.uint64(0x94D049BB133111EB)
        v ^= v >> np.uint64(31)
        return int(v.sum(dtype=np.uint64))


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 on arrays of uint64 holding 32-bit words (core/rng.c)."""
    m32 = np.uint64(0xFFFFFFFF)
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & m32
        hi1, lo1 = p1 >> np.uint64(32), p1 & m32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(0x9E3779B9)) & m32
        k1 = (k1 + np.uint64(0xBB67AE85)) & m32
    return c0, c1, c2, c3


def fnv1a64(s):
    h = 1469598103934665603
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) & M64
    return h


def rng_key(seed, stream):
    a = lambda v: np.array([v], dtype=np.uint64)  # noqa: E731
    r = philox4x32_10(a(stream & 0xFFFFFFFF), a(stream >> 32), a(0x6C6C6D74), a(0),
                      seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    return int(r[0][0]), int(r[1][0])


def dare_keep(seed, name, sub, n, density):
    """llmmerge's DARE mask of input `sub` for tensor `name`: u(j) < density (merge_methods.c)."""
    k0, k1 = rng_key(seed, fnv1a64(name))
    q = np.arange((n + 3) // 4, dtype=np.uint64)
    words = philox4x32_10(q & np.uint64(0xFFFFFFFF), q >> np.uint64(32),
                          np.full_like(q, sub), np.full_like(q, 0x44415245), k0, k1)
    w = np.stack(words, axis=1).reshape(-1)[:n]
    u = ((w >> np.uint64(8)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)
    return u.astype(np.float64) < density


# ---- files ----------------------------------------------------------------------------------


def read_model(path):
    import h5py
    with h5py.File(path, "r") as f:
        return {k: f["model"][k][...] for k in f["model"]}


def write_weights(path, tensors, like):
    """A weights file with the root attributes of `like` (an llmtrain file) and these tensors."""
    import h5py
    with h5py.File(like, "r") as src, h5py.File(path, "w") as f:
        for k, v in src.attrs.items():
            f.attrs[k] = v
        g = f.create_group("model")
        for k, v in tensors.items():
            d = g.create_dataset(k, data=np.asarray(v, dtype=np.float32))
            d.attrs["checksum"] = np.uint64(checksum(v))


# ---- the reference merge -------------------------------------------------------------------


def t_for(name, t, filters):
    import fnmatch
    for f, v in filters:
        if (fnmatch.fnmatchcase(name, f) if any(c in f for c in "*?[") else f in name):
            return v
    return t


def _np_sparsify(delta, method, density, name, sub, rescale, seed):
    if density >= 1:
        return delta
    if method == "ties":
        k = max(1, int(density * delta.size))
        flat = np.abs(delta).reshape(-1)
        keep = np.zeros(delta.size, dtype=bool)
        keep[np.argsort(-flat, kind="stable")[:k]] = True
        return delta * keep.reshape(delta.shape)
    keep = dare_keep(seed, name, sub, delta.size, density).reshape(delta.shape)
    masked = delta * keep
    if rescale == "1/density":
        return masked / np.float32(density)
    if rescale == "l1":
        before, after = np.abs(delta).sum(dtype=np.float64), np.abs(masked).sum(dtype=np.float64)
        if before >= 1e-7 and after >= 1e-7:
            return masked * np.float32(before / after)
    return masked


def _np_merge_one(method, name, xs, base, w, density, t, normalize, rescale, lam, seed):
    if method == "linear":
        acc = sum(np.float32(wi) * x for wi, x in zip(w, xs))
        return acc / np.float32(sum(w)) if normalize else acc
    if method == "slerp":
        a, b = (base, xs[0]) if base is not None else xs
        na, nb = np.linalg.norm(a.astype(np.float64)), np.linalg.norm(b.astype(np.float64))
        na, nb = (na if na > 1e-8 else 1.0), (nb if nb > 1e-8 else 1.0)
        dot = float(np.clip(np.sum((a / na).astype(np.float64) * (b / nb)), -1, 1))
        if abs(dot) > 0.9995:
            return ((1 - t) * a + t * b).astype(np.float32)
        th = np.arccos(dot)
        return (np.sin((1 - t) * th) / np.sin(th) * a + np.sin(t * th) / np.sin(th) * b).astype(np.float32)
    deltas = [_np_sparsify(x - base, method, d, name, i, rescale, seed)
              for i, (x, d) in enumerate(zip(xs, density))]
    wd = [np.float32(wi) * d for wi, d in zip(w, deltas)]
    if method in ("ties", "dare_ties"):
        s = sum(wd)
        sign = np.where(s >= 0, 1.0, -1.0)
        mask = [np.sign(e) == sign for e in wd]
        mixed = sum(e * m for e, m in zip(wd, mask))
        div = sum(np.float32(wi) * m for wi, m in zip(w, mask))
        div = np.where(div == 0, 1, div)
    else:
        mixed = sum(wd)
        div = np.float32(sum(w))
        div = 1 if abs(div) < 1e-8 else div
    if normalize:
        mixed = mixed / div
    return (base + np.float32(lam) * mixed).astype(np.float32)


def _mk_merge_one(method, name, xs, base, w, density, t, normalize, rescale, lam, seed):
    tt = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    if method == "linear":
        weight = torch.tensor([w], dtype=torch.float32)  # [outputs = 1, inputs]
        from mergekit.merge_methods.base import TensorBatch
        batch = TensorBatch(tuple(tt(x)[None] for x in xs))
        return mk_linear.linear_merge.implementation(batch, weight, normalize=normalize)[0].numpy()
    if method == "slerp":
        a, b = (base, xs[0]) if base is not None else xs
        return mk_slerp.slerp(torch.tensor([t]), tt(a)[None], tt(b)[None])[0].numpy()
    # the generalized task arithmetic of mergekit, with llmmerge's masks for DARE
    masks = [torch.from_numpy(dare_keep(seed, name, i, x.size, density[i]).reshape(x.shape)
                              .astype(np.float32)) for i, x in enumerate(xs)] if "dare" in method else []
    real_bernoulli = torch.bernoulli
    queue = list(masks)
    torch.bernoulli = lambda p: queue.pop(0)
    real_sparsify = None
    gta = sys.modules["mergekit.merge_methods.generalized_task_arithmetic"]
    if "dare" in method and rescale == "1/density":  # mergekit 0.0.5's bernoulli(rescale=True)
        real_sparsify = gta.sparsify
        gta.sparsify = lambda tensor, density, method, rescale_norm=None, **kw: \
            mk_sparsify.bernoulli(tensor, density, rescale_norm=None) / density if density < 1 else tensor
    try:
        m = mk_registry.get(method)
        group = TensorGroup.from_tensors([tt(base)] + [tt(x) for x in xs], base_index=0)
        ids = range(1, len(xs) + 1)
        params = {"weight": dict(zip(ids, w)), "density": dict(zip(ids, density)),
                  "normalize": normalize, "rescale": rescale == "l1" and "dare" in method, "lambda": lam, "int8_mask": False}
        return m.merge_group(group, **params).numpy()
    finally:
        torch.bernoulli = real_bernoulli
        if real_sparsify:
            gta.sparsify = real_sparsify


def merge(method, models, base=None, weights=None, density=None, t=0.5, t_filters=(),
          normalize=None, rescale="l1", lam=1.0, seed=1337, use_mergekit=True):
    """The reference of one llmmerge run: models and base are dicts name -> array."""
    n = len(models)
    w = list(weights) if weights is not None else [1.0] * n
    d = list(density) if density is not None else [1.0] * n
    d = d * n if len(d) == 1 else d
    if normalize is None:
        normalize = method in ("linear", "ties")
    one = _mk_merge_one if (use_mergekit and torch is not None) else _np_merge_one
    out = {}
    for name in models[0]:
        xs = [m[name].astype(np.float32) for m in models]
        b = base[name].astype(np.float32) if base is not None else None
        out[name] = one(method, name, xs, b, w, d, t_for(name, t, t_filters), normalize, rescale, lam, seed)
    return out


def errors(got, want):
    """max abs error, max relative error (|d| / max(|want|, 1e-3 * rms(want))) over all tensors."""
    ea = er = 0.0
    for k in want:
        g, r = got[k].astype(np.float64), want[k].astype(np.float64)
        d = np.abs(g - r)
        floor = max(1e-3 * np.sqrt(np.mean(r * r)), 1e-12)
        ea = max(ea, float(d.max()))
        er = max(er, float((d / np.maximum(np.abs(r), floor)).max()))
    return ea, er


if __name__ == "__main__":
    print(REFERENCE)
    sys.exit(0 if os.environ.get("MERGE_NEED_MERGEKIT") != "1" or torch is not None else 1)
