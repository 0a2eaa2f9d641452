"""report_plots — llmreport's plots (matplotlib, imported only when drawing): loss, learning rate,
gradient norm, throughput, time split per step, memory, energy, and the comparison plots of
several runs (train and validation loss).
Uses: report_runs, report_doc (run_label). Used by: llmreport.
"""

import math
import os
import re
import statistics

from report_runs import (_finite, _number, COMM_PREFIX)
from report_doc import run_label


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------

def load_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt, None
    except ImportError:
        return None, "plots skipped: matplotlib is not installed (Debian: python3-matplotlib)"
    except Exception as e:  # e.g. a numpy on PYTHONPATH that this matplotlib was not built for
        return None, "plots skipped: matplotlib cannot be imported (%s: %s)" % (type(e).__name__, e)


def _save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _line_plot(plt, path, title, ylabel, curves, logy=False):
    """curves: [(label, steps, values, style)]; None when there is nothing to draw."""
    curves = [c for c in curves if _finite(c[2])]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, xs, ys, style in curves:
        ax.plot(xs, ys, style, label=label, lw=1.2, ms=4)
    if logy and all(v > 0 for c in curves for v in _finite(c[2])):
        ax.set_yscale("log")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _binned(steps, columns, max_bars=40):
    """Mean of each column over consecutive bins of steps, at most max_bars bins."""
    n = len(steps)
    width = max(1, math.ceil(n / max_bars))
    labels, out = [], [[] for _ in columns]
    for i in range(0, n, width):
        labels.append(steps[i] if width == 1 else "%d-%d" % (steps[i], steps[min(i + width, n) - 1]))
        for col, dst in zip(columns, out):
            part = _finite(col[i:i + width])
            dst.append(statistics.mean(part) if part else 0.0)
    return labels, out


def time_split_plot(plt, run, path):
    """Stacked bars per step (or bin of steps): compute (the rest of the step) and the waits on
    each communicator."""
    h = run.h
    recs = [r for r in h.step_list if math.isfinite(_number(r.get("ms")))]
    comm = h.keys(lambda k: k.startswith(COMM_PREFIX))
    if not recs:
        return None
    steps = [r["step"] for r in recs]
    parts = [[_number(r.get(k, 0.0)) for r in recs] for k in comm]
    rest = [max(0.0, _number(r["ms"]) - sum(_number(r.get(k, 0.0)) for k in comm
                                             if math.isfinite(_number(r.get(k, 0.0))))) for r in recs]
    labels, cols = _binned(steps, [rest] + parts)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(labels)
    names = ["compute and the rest"] + [re.sub(r"_wait$", "", k[len(COMM_PREFIX):]) + " wait" for k in comm]
    for name, col in zip(names, cols):
        ax.bar(range(len(labels)), col, bottom=bottom, label=name, width=0.85)
        bottom = [b + c for b, c in zip(bottom, col)]
    ticks = list(range(0, len(labels), max(1, len(labels) // 10)))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(labels[i]) for i in ticks], fontsize=7, rotation=30)
    ax.set_xlabel("step" if isinstance(labels[0], int) else "steps (mean per bin)")
    ax.set_ylabel("ms per step (rank 0)")
    ax.set_title("%s: time split per step" % run_label(run), fontsize=10)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _smoothed(steps, values, window):
    """The trailing mean of `window` finite values at each step (noisy small-batch losses)."""
    out, recent = [], []
    for v in values:
        if math.isfinite(v):
            recent = (recent + [v])[-window:]
        out.append(statistics.mean(recent) if recent else float("nan"))
    return steps, out


def run_plots(plt, run, folder):
    """[(title, path)] of the plots of one run, written into folder."""
    h, name, out = run.h, run_label(run), []
    os.makedirs(folder, exist_ok=True)

    def add(title, path):
        if path:
            out.append((title, path))

    p = lambda f: os.path.join(folder, f)  # noqa: E731
    skipped = [r for r in h.step_list if r.get("applied") is False]  # anomalies, fp16 overflows
    steps, losses = h.series("loss")
    curves = [("train", steps, losses, "-")]
    window = len(steps) // 25
    if window > 1:
        curves.append(("train, mean of %d steps" % window,) + _smoothed(steps, losses, window) + ("k-",))
    curves.append(("validation",) + h.series("val_loss", h.val_list) + ("o-",))
    curves.append(("skipped step",) + h.series("loss", skipped) + ("rx",))
    add("loss", _line_plot(plt, p("loss.png"), "%s: loss" % name, "loss", curves))
    add("learning rate", _line_plot(plt, p("lr.png"), "%s: learning rate" % name, "lr",
                                    [("lr",) + h.series("lr") + ("-",)]))
    add("gradient norm", _line_plot(plt, p("grad_norm.png"), "%s: gradient norm (before clipping)" % name,
                                    "grad norm", [("grad_norm",) + h.series("grad_norm") + ("-",)], logy=True))
    add("throughput", _line_plot(plt, p("tokens_per_s.png"), "%s: throughput" % name, "tokens/s",
                                 [("tokens/s",) + h.series("tokens_per_s") + ("-",)]))
    add("time split", time_split_plot(plt, run, p("time_split.png")))
    add("memory", _line_plot(plt, p("memory.png"), "%s: memory of rank 0" % name, "MiB",
                             [(k,) + h.series(k) + ("-",) for k in ("rss_mib", "peak_mib")]))
    energy = h.keys(lambda k: "energy" in k)
    if energy:
        add("energy", _line_plot(plt, p("energy.png"), "%s: energy" % name, "as recorded",
                                 [(k,) + h.series(k) + ("-",) for k in energy]))
    return out


def compare_plots(plt, runs, folder):
    os.makedirs(folder, exist_ok=True)
    out = []
    curves = [(run_label(r),) + r.h.series("loss") + ("-",) for r in runs]
    path = _line_plot(plt, os.path.join(folder, "compare_loss.png"), "train loss", "loss", curves)
    if path:
        out.append(("train loss, all runs", path))
    curves = [(run_label(r),) + r.h.series("val_loss", r.h.val_list) + ("o-",) for r in runs]
    path = _line_plot(plt, os.path.join(folder, "compare_val_loss.png"), "validation loss", "val loss", curves)
    if path:
        out.append(("validation loss, all runs", path))
    return out
