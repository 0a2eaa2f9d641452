"""sweep_report — llmsweep's results: results.md and results.csv (every trial), parameter
importance, best.nml and the plots (matplotlib when installed). Uses: nml.py, sweep_space,
sweep_state. Used by: sweep_runner (at the end of a study) and llmsweep (--report).
"""

import csv
import io
import os

from nml import (format_value, namelist_with, overrides_text)  # nml.py, beside this file
from sweep_state import (_is_finite, atomic_write)


# ---------------------------------------------------------------------------------------------
# Results: results.md and results.csv (every trial), best.nml, plots.
# ---------------------------------------------------------------------------------------------

def best_trial(study, state):
    """The best trial at the highest rung any trial finished (completed trials for a plain
    study)."""
    for r in reversed(study.rungs):
        done = [t for t in state.trials if _is_finite(t["results"].get(str(r)))]
        if done:
            return min(done, key=lambda t: (t["results"][str(r)], t["id"]))
    return None


def importance(study, trials):
    """Per dimension: the share of the objective's variance explained by grouping the trials by
    that parameter alone (categories, or 4 quantile bins of a numeric one). 0..1."""
    ys = [t["objective"] for t in trials]
    if len(ys) < 4:
        return {}
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    if total <= 0:
        return {}
    out = {}
    for d in study.dims:
        if d.kind == "choice":
            keys = [d.choices.index(t["params"][d.name]) for t in trials]
        else:
            xs = [d.encode(t["params"][d.name])[0] for t in trials]
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            keys = [0] * len(xs)
            for rank, i in enumerate(order):
                keys[i] = rank * 4 // len(xs)
        groups = {}
        for k, y in zip(keys, ys):
            groups.setdefault(k, []).append(y)
        between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
        out[d.name] = between / total
    return out


def _table_rows(study, state):
    obj = study.cfg["objective"]
    head = ["trial", "status", obj, "steps", "rung"] + [d.name for d in study.dims] + [
        "tokens", "wall_s", "node_hours", "launches", "error"]
    rows = []
    for t in state.trials:
        rows.append([t["name"], t["status"], t["objective"], t["steps"], t["rung"]] +
                    [t["params"][d.name] for d in study.dims] +
                    [t["tokens"], round(t["wall_s"], 2), round(t["node_hours"], 6), t.get("launches", 0),
                     t.get("error", "")])
    return head, rows


def write_tables(study, state):
    """results.csv and results.md: cheap, rewritten after every trial."""
    head, rows = _table_rows(study, state)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    atomic_write(os.path.join(study.dir, "results.csv"), buf.getvalue())
    atomic_write(os.path.join(study.dir, "results.md"), _markdown(study, state, head, rows))


def _md_cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "%.6g" % v
    return str(v).replace("|", "\\|")


def _markdown(study, state, head, rows):
    c, obj = study.cfg, study.cfg["objective"]
    best = best_trial(study, state)
    counts = {}
    for t in state.trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    out = ["# Study `%s`" % c["name"], "",
           "Strategy `%s`%s, objective `%s` (minimised), base `%s`, %d trials: %s." % (
               c["strategy"], ", scheduler `asha` (eta %d, rungs %s steps)" % (c["eta"], ", ".join(
                   str(r) for r in study.rungs)) if c["scheduler"] == "asha" else "",
               obj, c["base"], len(state.trials), ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))),
           "", "Space: " + "; ".join("`%s = %s`" % (d.name, d.describe()) for d in study.dims) + ".", ""]
    tokens = sum(t["tokens"] for t in state.trials)
    hours = sum(t["node_hours"] for t in state.trials)
    out.append("Used: %d tokens%s, %.4g node-hours%s, %d trials%s." % (
        tokens, " of %.6g" % c["max_tokens"] if c["max_tokens"] else "", hours,
        " of %.6g" % c["max_node_hours"] if c["max_node_hours"] else "", len(state.trials),
        " of %d" % study.max_trials))
    if state.doc.get("stopped_launching"):
        out.append("Stopped launching: %s." % state.doc["stopped_launching"])
    out.append("")
    if best:
        out += ["**Best: %s**, %s = %.6g at step %d: %s (`best.nml`)." % (
            best["name"], obj, best["objective"], best["steps"],
            ", ".join("`%s = %s`" % (k, format_value(v)) for k, v in best["params"].items())), ""]
    if c["scheduler"] == "asha":
        out += ["| rung | steps | reported | promoted | stopped here |", "|---|---|---|---|---|"]
        for k, r in enumerate(study.rungs):
            rep = [t for t in state.trials if _is_finite(t["results"].get(str(r)))]
            prom = sum(1 for t in rep if t["rung"] > k)
            stop = sum(1 for t in rep if t["rung"] == k and t["status"] == "stopped")
            out.append("| %d | %d | %d | %d | %d |" % (k, r, len(rep), prom, stop))
        out.append("")
    done = [t for t in state.trials if _is_finite(t["objective"]) and t["status"] == "completed"]
    imp = importance(study, done if len(done) >= 4 else [t for t in state.trials if _is_finite(t["objective"])])
    if imp:
        out += ["Parameter importance (share of the objective's variance explained by the parameter "
                "alone):", "", "| parameter | importance |", "|---|---|"]
        out += ["| %s | %.2f |" % (k, v) for k, v in sorted(imp.items(), key=lambda kv: -kv[1])]
        out.append("")
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [_md_cell(v) for v in r]
        if best and r[0] == best["name"]:
            cells[0] = "**%s**" % cells[0]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def write_best(study, state, best):
    o = {(d.group, d.key): best["params"][d.name] for d in study.dims}
    if study.steps_set:
        o[("train", "max_steps")] = study.rungs[best["rung"]]
    o[("run", "name")] = "%s-best" % study.cfg["name"]
    header = ("! best.nml - the best configuration of study %s (llmsweep): trial %s, %s = %.6g at step %d.\n"
              "! The base %s with: %s\n" % (
                  study.cfg["name"], best["name"], study.cfg["objective"], best["objective"], best["steps"],
                  study.cfg["base"], overrides_text(o)))
    atomic_write(os.path.join(study.dir, "best.nml"), namelist_with(study.base, o, header))


def write_plots(study, state):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("llmsweep: plots skipped: matplotlib is not installed (Debian: python3-matplotlib)")
        return []
    except Exception as e:  # e.g. a numpy on PYTHONPATH that this matplotlib was not built for
        print("llmsweep: plots skipped: matplotlib cannot be imported (%s: %s)" % (type(e).__name__, e))
        return []
    obj = study.cfg["objective"]
    rows = [t for t in state.trials if _is_finite(t["objective"])]
    fails = [t for t in state.trials if t["status"] == "failed"]
    written = []
    fig, ax = plt.subplots(figsize=(7, 4))
    if rows:
        colors = {"completed": "tab:blue", "stopped": "tab:orange", "paused": "tab:orange", "running": "tab:gray"}
        for status in sorted({t["status"] for t in rows}):
            sel = [t for t in rows if t["status"] == status]
            ax.scatter([t["id"] for t in sel], [t["objective"] for t in sel], s=18,
                       color=colors.get(status, "tab:blue"), label=status)
        best, xs, ys = float("inf"), [], []
        full = [t for t in sorted(rows, key=lambda t: t["id"]) if t["rung"] == len(study.rungs) - 1]
        for t in full:
            best = min(best, t["objective"])
            xs.append(t["id"])
            ys.append(best)
        if xs:
            ax.step(xs, ys, where="post", color="black", lw=1, label="best so far")
    for t in fails:
        ax.axvline(t["id"], color="tab:red", alpha=0.3, lw=1)
    ax.set_xlabel("trial")
    ax.set_ylabel(obj)
    ax.set_title("%s: %s by trial%s" % (study.cfg["name"], obj, " (red: failed)" if fails else ""))
    if rows:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(study.dir, "objective_vs_trial.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    n = len(study.dims)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n + 0.5, 3.2), squeeze=False)
    for ax, d in zip(axes[0], study.dims):
        if d.kind == "choice":
            xs = [d.choices.index(t["params"][d.name]) for t in rows]
            ax.set_xticks(range(len(d.choices)))
            ax.set_xticklabels([str(c) for c in d.choices])
        else:
            xs = [t["params"][d.name] for t in rows]
            if d.is_log:
                ax.set_xscale("log")
        ax.scatter(xs, [t["objective"] for t in rows], s=14,
                   c=["tab:blue" if t["status"] == "completed" else "tab:orange" for t in rows])
        ax.set_xlabel(d.name)
    axes[0][0].set_ylabel(obj)
    fig.suptitle("%s: %s against each parameter (orange: stopped early)" % (study.cfg["name"], obj), fontsize=9)
    fig.tight_layout()
    path = os.path.join(study.dir, "objective_vs_params.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    return written


def write_results(study, state, plots=True):
    write_tables(study, state)
    best = best_trial(study, state)
    if best:
        write_best(study, state, best)
    if plots:
        write_plots(study, state)
    return best
