#!/usr/bin/env python3
"""PyTorch reference for llmtrain's label smoothing and z-loss (validation/e2e/
label_smoothing_zloss_torch.sh). Makes logits [N, Vp] (padding columns hold large values that
must be ignored) and targets, runs build/ref/xent_reg_dump on them (tp vocabulary shards), and
compares in float64 with
  torch.nn.functional.cross_entropy(logits[:, :V], targets, label_smoothing=e, reduction='none')
  z_coef * torch.logsumexp(logits[:, :V], -1) ** 2
and the autograd gradient of mean(cross_entropy + z) with dlogits[:, :V]; dlogits[:, V:] must be
exactly 0. Tolerances: losses and z-loss 1e-5 relative per row, gradients 1e-5 of max |grad|.

usage: xent_reg_reference.py DUMP_PROGRAM WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

N, V, VP = 64, 300, 384


def check(dump, work, e, zc, tp):
    rng = np.random.default_rng(1000 + tp)
    logits = (rng.standard_normal((N, VP)) * 3.0).astype(np.float32)
    logits[:, V:] = 50.0  # padding: would dominate every sum if it were not excluded
    targets = rng.integers(0, V, N).astype(np.int32)
    lp, tpath, out = (os.path.join(work, n) for n in ("logits.f32", "targets.i32", "out.f32"))
    logits.tofile(lp)
    targets.tofile(tpath)
    subprocess.run([dump, str(N), str(V), str(VP), str(tp), repr(e), repr(zc), lp, tpath, out],
                   check=True)
    got = np.fromfile(out, dtype=np.float32)
    loss, z, dl = got[:N], got[N:2 * N], got[2 * N:].reshape(N, VP)
    x = torch.tensor(logits[:, :V], dtype=torch.float64, requires_grad=True)
    t = torch.tensor(targets, dtype=torch.long)
    ce = F.cross_entropy(x, t, label_smoothing=e, reduction="none")
    zl = zc * torch.logsumexp(x, dim=-1) ** 2
    (ce + zl).mean().backward()
    ce, zl, g = ce.detach().numpy(), zl.detach().numpy(), x.grad.numpy()
    e_loss = np.max(np.abs(loss - ce) / np.abs(ce))
    e_z = np.max(np.abs(z - zl) / np.maximum(np.abs(zl), 1e-30)) if zc > 0 else np.max(np.abs(z))
    e_g = np.max(np.abs(dl[:, :V] - g)) / np.max(np.abs(g))
    pad = np.max(np.abs(dl[:, V:]))
    ok = e_loss <= 1e-5 and e_z <= 1e-5 and e_g <= 1e-5 and pad == 0.0
    print("label_smoothing %.2f z_loss %-6g tp %d: losses rel %.1e, z-loss rel %.1e, dlogits %.1e, "
          "padding grad max %g: %s" % (e, zc, tp, e_loss, e_z, e_g, pad, "ok" if ok else "FAIL"))
    return ok


def main():
    dump, work = sys.argv[1], sys.argv[2]
    cases = [(0.1, 0.0, 1), (0.0, 1e-3, 1), (0.1, 1e-3, 2), (0.3, 1e-2, 4), (1.0, 0.0, 2)]
    return 0 if all([check(dump, work, *c) for c in cases]) else 1


if __name__ == "__main__":
    sys.exit(main())
