#!/usr/bin/env python3
"""Compare the /model tensors of two llmtrain HDF5 files.

For each tensor: relative L2 error ||a - b|| / ||b|| (absolute where ||b|| = 0) and the largest
absolute difference. Exits 1 if any tensor's relative error exceeds --rtol or its largest
absolute difference exceeds --atol (each check only when given), or if the sets of tensors or
their shapes differ.

usage: compare_weights.py A.h5 B.h5 [--rtol 1e-4] [--atol 1e-4]
"""
import argparse
import sys

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=float("inf"))
    ap.add_argument("--atol", type=float, default=float("inf"))
    args = ap.parse_args()
    fa, fb = h5py.File(args.a, "r"), h5py.File(args.b, "r")
    names_a, names_b = set(fa["model"]), set(fb["model"])
    if names_a != names_b:
        print("tensor sets differ:", sorted(names_a ^ names_b))
        return 1
    worst, bad = ("", 0.0, 0.0), 0
    for n in sorted(names_a):
        a = np.array(fa["model"][n], dtype=np.float64)
        b = np.array(fb["model"][n], dtype=np.float64)
        if a.shape != b.shape:
            print("%s: shapes %s vs %s" % (n, a.shape, b.shape))
            return 1
        nb = np.linalg.norm(b)
        err = np.linalg.norm(a - b) / nb if nb > 0 else np.linalg.norm(a - b)
        mx = float(np.abs(a - b).max()) if a.size else 0.0
        if err > args.rtol or mx > args.atol:
            bad += 1
            print("%-24s rel.L2 %.2e  max abs %.2e  exceeds rtol %g / atol %g"
                  % (n, err, mx, args.rtol, args.atol))
        if err >= worst[1]:
            worst = (n, err, mx)
    largest = max(float(np.abs(np.array(fa["model"][n], dtype=np.float64) -
                                np.array(fb["model"][n], dtype=np.float64)).max(initial=0.0))
                  for n in names_a)
    print("%d tensors: worst rel.L2 error %.2e (%s), largest abs difference %.2e; "
          "tolerances rtol %g atol %g: %s" % (len(names_a), worst[1], worst[0], largest,
                                              args.rtol, args.atol, "FAIL" if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
