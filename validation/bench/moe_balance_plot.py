#!/usr/bin/env python3
"""The expert load balance over training of MoE runs, from their metrics.jsonl: the coefficient
of variation of the expert load (moe<L>_cv: std/mean of the assignments per expert, 0 =
balanced, sqrt(E-1) = every token on one expert) per step, the mean over the MoE blocks as a
line and the blocks' range shaded, beside the training loss. Writes one PNG (matplotlib, Agg).

usage: moe_balance_plot.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--title TEXT]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_steps(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = [json.loads(l) for l in open(path) if '"loss"' in l]
    if not rows:
        raise SystemExit("%s: no step records" % path)
    layers = sorted(int(k[3:-3]) for k in rows[0] if k.startswith("moe") and k.endswith("_cv"))
    if not layers:
        raise SystemExit("%s: no moe<L>_cv fields (not an MoE run?)" % path)
    return rows, layers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    fig, (ax_cv, ax_loss) = plt.subplots(1, 2, figsize=(8, 3.2), dpi=100)
    for spec in a.runs:
        label, run_dir = spec.split("=", 1)
        rows, layers = read_steps(run_dir)
        step = [r["step"] for r in rows]
        cvs = [[r["moe%d_cv" % l] for l in layers] for r in rows]
        line, = ax_cv.plot(step, [sum(c) / len(c) for c in cvs], label=label, lw=1.5)
        ax_cv.fill_between(step, [min(c) for c in cvs], [max(c) for c in cvs],
                           color=line.get_color(), alpha=0.15, lw=0)
        ax_loss.plot(step, [r["loss"] for r in rows], label=label, lw=1.5, color=line.get_color())
    ax_cv.set_xlabel("step")
    ax_cv.set_ylabel("expert load cv (std/mean)")
    ax_cv.set_title("load balance: mean over MoE blocks (band: range)", fontsize=9)
    ax_cv.set_ylim(bottom=0)
    ax_cv.legend(fontsize=8)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("training cross-entropy")
    ax_loss.set_title("loss", fontsize=9)
    if a.title:
        fig.suptitle(a.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
