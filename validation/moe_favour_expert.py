#!/usr/bin/env python3
"""Edit an llmtrain weights file (HDF5, global shapes) so that every MoE block's router favours
expert 0, for the load-balancing test (validation/e2e/moe_aux_balance.sh) and bench
(validation/bench/moe_bench.sh).

In each MoE block L: h.L.ln2.b = u (every entry BIAS), the router rows h.L.moe.router.w scaled
by ROUTER_SCALE (so that the tokens' own logits differ by O(1) and a balanced routing exists),
then row 0 += (OFFSET / |u|^2) u. The LayerNorm output before its bias has zero mean over the
features, so x.u = |u|^2 for every token x = n * w + u while ln2.w = 1 (initial weights): expert
0's logit is raised by OFFSET for every token. The edited tensors' checksum attributes are
rewritten (merge_reference.checksum = io/checkpoint.c's), so &run init_from accepts the file.

usage: moe_favour_expert.py SRC.h5 DST.h5 [--offset 4] [--router-scale 10] [--bias 0.5]
"""
import argparse
import os
import shutil
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from merge_reference import checksum  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--offset", type=float, default=4.0, help="added to expert 0's logit")
    ap.add_argument("--router-scale", type=float, default=10.0)
    ap.add_argument("--bias", type=float, default=0.5, help="every entry of ln2.b")
    a = ap.parse_args()
    shutil.copy(a.src, a.dst)
    with h5py.File(a.dst, "r+") as f:
        m = f["model"]
        blocks = sorted(int(k.split(".")[1]) for k in m if k.endswith(".moe.router.w"))
        if not blocks:
            sys.exit("%s: no MoE blocks (h.L.moe.router.w)" % a.src)
        for l in blocks:
            b, w = m["h.%d.ln2.b" % l], m["h.%d.moe.router.w" % l]
            u = np.full(b.shape, a.bias, np.float32)
            wr = w[...] * np.float32(a.router_scale)
            wr[0] += np.float32(a.offset / float(u @ u)) * u
            b[...], w[...] = u, wr
            for d in (b, w):
                d.attrs["checksum"] = np.uint64(checksum(d[...]))
    print("expert 0 favoured by %g in the router logits of MoE blocks %s" % (a.offset, blocks))


if __name__ == "__main__":
    main()
