#!/usr/bin/env python3
"""llmreport — what happened in one llmtrain run, or how several runs compare: plots and a
summary as one Markdown file or one self-contained HTML page.

    ./llmreport RUN_DIR                     report on one run (written to RUN_DIR/report.md)
    ./llmreport RUN_DIR... --out FILE       FILE ends in .md (plots beside it in FILE_files/) or
                                            .html (the same plots embedded: one file to mail)

With several run directories the report opens with a comparison: final train and validation
loss, median tokens/s and MFU, energy when recorded, the namelist keys whose values differ, and
the loss curves overlaid; a section per run follows.

What it reads in a run directory (RUN_DIR is &run out_dir/name):
  metrics.jsonl  required. Step records (loss, lr, grad_norm, ms, tokens_per_s, mfu, rss_mib,
                 peak_mib, the communication waits ms_tp / ms_pp_wait / ms_dp_wait, energy_j and
                 any member whose name holds "energy"), validation records (val_loss), checkpoint
                 and weights records, stop records (stopped_by), event records ("event": anomaly,
                 restart, stage, ...), provenance records ("kind": "provenance"), end-of-run
                 records (energy_run_j, emissions_g, papi_totals_rank). A torn last line (a killed
                 run) is skipped. A resumed or rolled-back run appends: every step appears once,
                 from its last occurrence — records marked "superseded": true are left out (events
                 among them are listed as superseded), {"event":"restart","step":N} (or
                 "from_step":N) drops the records after step N, and a step record whose step is
                 not past the previous one supersedes the records from that step on.
  run.json       optional: provenance (commit, build, hosts, ...) and the effective namelist
                 (member "config": the namelist text; or a {group: {key: value}} object).
  trace.json     optional: Chrome trace events (pid = rank, "cat" the phase): per rank, busy
                 time (the union of its events other than the "step" frames; communication, cat
                 "comm", apart from the rest) and idle time (the rest of its steps); per event
                 name, the total and mean.
  *.h5           the effective namelist stored in the newest checkpoint or weights file (h5py),
                 when run.json has none; else a "config" / "namelist" member of a metrics record.

Why Python and not C like the rest of llmtrain: this program reads small text files after a run
and draws plots; nothing in it is on the training path or performance-critical, and matplotlib
(Debian's python3-matplotlib, with numpy) draws what would be thousands of lines of C. It reuses
the tools' reader of llmtrain's namelist grammar (src/tools/nml.py). Without matplotlib the
report is written without plots, and says so.

Exit codes: 0 the report was written; 2 bad input (a directory without metrics.jsonl, an output
name that is neither .md nor .html, an output that cannot be written): one message naming it.
"""
import base64
import glob
import html
import json
import math
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nml as nl  # noqa: E402  (the namelist reader: parse_namelist, UserError)

EXIT_OK, EXIT_USER = 0, 2
USAGE = "usage: llmreport RUN_DIR... [--out report.md | report.html]"
COMM_PREFIX = "ms_"  # step members holding milliseconds waited on one communicator


class UserError(Exception):
    """Bad input: printed once as 'llmreport: <message>', exit code 2."""


# ---------------------------------------------------------------------------------------------
# Reading a run directory
# ---------------------------------------------------------------------------------------------

def _number(v):
    """A JSON value as a float: null (how llmtrain writes NaN/Inf) and non-numbers are NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return float("nan")
    return float(v)


def _finite(values):
    return [v for v in values if isinstance(v, float) and math.isfinite(v)]


def read_jsonl(path):
    """(records, lines that are not JSON objects): a killed run leaves a torn last line."""
    records, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(r, dict):
                records.append(r)
            else:
                bad += 1
    return records, bad


class History:
    """The records of one metrics.jsonl, each step once (see the module comment)."""

    def __init__(self, records):
        self.steps, self.vals = {}, {}  # step -> record
        self.checkpoints, self.stops, self.events, self.restarts = [], [], [], []
        self.provenance, self.totals = [], []  # provenance records; end-of-run records (energy, PAPI)
        self.superseded = 0
        for r in records:
            self._add(r)
        self.step_list = [self.steps[s] for s in sorted(self.steps)]
        self.val_list = [self.vals[s] for s in sorted(self.vals)]

    def _drop_from(self, first):
        for table in (self.steps, self.vals):
            for s in [s for s in table if s >= first]:
                del table[s]
                self.superseded += 1

    def _add(self, r):
        step = r.get("step")
        if r.get("superseded") is True:  # written by an attempt that a resume or rollback undid
            self.superseded += 1
            if "event" in r:  # what happened then is still history
                self.events.append(dict(r, event="%s (superseded)" % r["event"]))
            return
        if r.get("event") == "restart":
            self.restarts.append(r)
            start = r.get("from_step", step)  # the step the run continued from
            if isinstance(start, int):
                self._drop_from(start + 1)
            return
        if r.get("kind") == "provenance":
            self.provenance.append(r)
        elif "event" in r or not isinstance(step, int) or isinstance(step, bool):
            self.events.append(r)
        elif "loss" in r:
            self._drop_from(step)  # a step at or before an earlier one: a resume or rollback
            self.steps[step] = r
        elif "val_loss" in r:
            self.vals.pop(step, None)  # the same step validated twice: the last one counts
            self.vals[step] = r
        elif "checkpoint" in r or "weights" in r:
            self.checkpoints.append(r)
        elif "stopped_by" in r:
            self.stops.append(r)
        else:
            self.totals.append(r)

    def series(self, key, records=None):
        records = self.step_list if records is None else records
        return ([r["step"] for r in records if key in r], [_number(r[key]) for r in records if key in r])

    def keys(self, test):
        """Member names of the step records that pass `test`, in first-seen order."""
        seen = {}
        for r in self.step_list:
            for k in r:
                if test(k):
                    seen.setdefault(k, None)
        return list(seen)


def _read_json_file(path, what):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return json.load(f), None
    except OSError as e:
        return None, "%s: %s" % (path, e.strerror or e)
    except ValueError as e:
        return None, "%s: not valid JSON (%s); %s ignored" % (path, e, what)


def _flatten(tree, prefix=""):
    """{'train': {'lr': 3e-3}} -> {'train.lr': 3e-3}."""
    flat = {}
    for k, v in tree.items():
        name = prefix + str(k)
        if isinstance(v, dict):
            flat.update(_flatten(v, name + "."))
        else:
            flat[name] = tuple(v) if isinstance(v, list) else v
    return flat


def namelist_from_text(text, where):
    """group.key -> value of a namelist's text (the last value given wins, as in llmtrain)."""
    groups = nl.namelist_dict(nl.parse_namelist(where, text))
    return {"%s.%s" % (g, k): tuple(v) if isinstance(v, list) else v
            for g, keys in groups.items() for k, v in keys.items()}


def _namelist_member(obj, where):
    """The effective namelist held by a JSON object (run.json or a metrics record), or None."""
    for key in ("namelist", "effective_namelist", "config", "effective_config"):
        v = obj.get(key)
        if isinstance(v, dict):
            return _flatten(v)
        if isinstance(v, str) and "&" in v:
            return namelist_from_text(v, "%s member %s" % (where, key))
    return None


def _h5_step(path):
    m = re.search(r"step(\d+)\.h5$", path)
    return int(m.group(1)) if m else -1


def namelist_from_h5(run_dir):
    """(namelist, file) from the newest checkpoint or weights file in the run directory."""
    files = sorted(glob.glob(os.path.join(run_dir, "*.h5")), key=lambda p: (_h5_step(p), p), reverse=True)
    if not files:
        return None, None
    try:
        import h5py
    except ImportError:
        return None, None
    for path in files:
        try:
            with h5py.File(path, "r") as f:
                text = f.attrs["config"] if "config" in f.attrs else f["config"][()] if "config" in f else None
        except (OSError, KeyError, ValueError):
            continue  # a torn or foreign file: try the next one
        if text is None:
            continue
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        try:
            return namelist_from_text(str(text), path + " (attribute config)"), path
        except nl.UserError:
            continue
    return None, None


def _trace_events(path):
    """The events of a Chrome trace file: a JSON array or {"traceEvents": [...]}; an unclosed
    array (the tracer was killed) is read up to its last complete event."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        cut = text.rstrip().rstrip(",")
        cut = cut[:cut.rfind("}") + 1].rstrip().rstrip(",") if "}" in cut else cut
        for tail in ("]", "]}"):
            try:
                data = json.loads(cut + tail)
                break
            except ValueError:
                data = None
        if data is None:
            raise ValueError("not a Chrome trace (JSON array or {\"traceEvents\": [...]})")
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


def _intervals(events):
    """(pid, name, cat, start_us, end_us) of complete events ('X') and of matched 'B'/'E' pairs."""
    out, open_ = [], {}
    for e in events:
        ph, ts = e.get("ph"), e.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        pid, tid, name, cat = e.get("pid", 0), e.get("tid", 0), str(e.get("name", "?")), str(e.get("cat", ""))
        if ph == "X" and isinstance(e.get("dur"), (int, float)):
            out.append((pid, name, cat, float(ts), float(ts) + float(e["dur"])))
        elif ph == "B":
            open_.setdefault((pid, tid), []).append((name, cat, float(ts)))
        elif ph == "E" and open_.get((pid, tid)):
            bname, bcat, start = open_[(pid, tid)].pop()
            out.append((pid, bname, bcat, start, float(ts)))
    return out


def _process_names(events):
    return {e.get("pid"): str(e.get("args", {}).get("name", "")) for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict)}


def _union_length(spans):
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


COMM_WORDS = ("wait", "all-reduce", "allreduce", "all-gather", "reduce-scatter", "all-to-all", "recv", "send",
              "barrier", "bcast")


def _is_frame(name, cat):
    """A step event encloses the phases of the step: a frame, not work."""
    return cat == "step" or (not cat and name == "step")


def _is_comm(name, cat):
    return cat == "comm" or (not cat and any(w in name.lower() for w in COMM_WORDS))


def trace_summary(path):
    """Per rank: busy ms (the union of its events other than the step frames) and idle ms (the
    rest of its span: the union of its step frames and events, or the whole trace's span when it
    has no step frames), split into communication (cat "comm", or a name that says wait /
    all-reduce / send / recv ...) and the rest; per event name: count, total and mean ms, ranks."""
    events = _trace_events(path)
    iv = _intervals(events)
    if not iv:
        return None
    names_of = _process_names(events)
    t0, t1 = min(i[3] for i in iv), max(i[4] for i in iv)

    def rank_order(pid):  # numeric ranks first, in order; then any other pid
        return (0, pid, "") if isinstance(pid, int) else (1, 0, str(pid))
    ranks = []
    for pid in sorted({i[0] for i in iv}, key=rank_order):
        mine = [i for i in iv if i[0] == pid]
        frames = [(a, b) for _, n, c, a, b in mine if _is_frame(n, c)]
        work = [(a, b) for _, n, c, a, b in mine if not _is_frame(n, c)]
        comm = [(a, b) for _, n, c, a, b in mine if not _is_frame(n, c) and _is_comm(n, c)]
        span = _union_length(frames + work) if frames else t1 - t0
        busy, comm_us = _union_length(work), _union_length(comm)
        ranks.append({"rank": pid, "name": names_of.get(pid, ""), "events": len(mine), "busy_ms": busy / 1e3,
                      "idle_ms": max(0.0, span - busy) / 1e3, "comm_ms": comm_us / 1e3,
                      "compute_ms": (busy - comm_us) / 1e3, "busy_pct": 100.0 * busy / span if span > 0 else 100.0})
    names = {}
    for pid, name, _, a, b in iv:
        n = names.setdefault(name, {"name": name, "count": 0, "total_ms": 0.0, "ranks": set()})
        n["count"] += 1
        n["total_ms"] += (b - a) / 1e3
        n["ranks"].add(pid)
    by_name = sorted(names.values(), key=lambda n: -n["total_ms"])
    for n in by_name:
        n["mean_ms"] = n["total_ms"] / n["count"]
        n["ranks"] = len(n["ranks"])
    return {"span_ms": (t1 - t0) / 1e3, "ranks": ranks, "names": by_name}


class Run:
    """One run directory: its history, provenance, namelist and trace summary."""

    def __init__(self, run_dir):
        self.dir = run_dir
        self.notes = []  # what could not be read, said in the report
        metrics = os.path.join(run_dir, "metrics.jsonl")
        if not os.path.isdir(run_dir):
            raise UserError("%s: %s (expected a run directory, &run out_dir/name)"
                            % (run_dir, "not a directory" if os.path.exists(run_dir) else "no such directory"))
        if not os.path.isfile(metrics):
            raise UserError("%s: no metrics.jsonl in this directory (is it a run directory? "
                            "&log jsonl = .false. writes none)" % run_dir)
        try:
            records, torn = read_jsonl(metrics)
        except OSError as e:
            raise UserError("%s: %s" % (metrics, e.strerror or e))
        if torn:
            self.notes.append("%d line(s) of metrics.jsonl are not JSON records (a torn last line "
                              "is what a killed run leaves): skipped" % torn)
        self.h = History(records)
        if not self.h.step_list:
            self.notes.append("metrics.jsonl holds no step records (the run stopped before its first step)")
        if self.h.superseded:
            self.notes.append("%d record(s) superseded by a resume, rollback or restart: each step is "
                              "shown from its last occurrence" % self.h.superseded)
        self.run_json = self._run_json()
        self.namelist, self.namelist_source = self._namelist(records)
        self.trace = self._trace()

    def _run_json(self):
        path = os.path.join(self.dir, "run.json")
        if not os.path.exists(path):
            return None
        data, err = _read_json_file(path, "provenance")
        if err:
            self.notes.append(err)
        return data if isinstance(data, dict) else None

    def _namelist(self, records):
        where = os.path.join(self.dir, "run.json")
        try:
            if self.run_json:
                found = _namelist_member(self.run_json, where)
                if found:
                    return found, "run.json"
            found, path = namelist_from_h5(self.dir)
            if found:
                return found, os.path.basename(path)
            for r in records:
                found = _namelist_member(r, os.path.join(self.dir, "metrics.jsonl"))
                if found:
                    return found, "metrics.jsonl"
        except nl.UserError as e:
            self.notes.append("namelist not read: %s" % e)
        return {}, None

    def _trace(self):
        path = os.path.join(self.dir, "trace.json")
        if not os.path.exists(path):
            return None
        try:
            return trace_summary(path)
        except (OSError, ValueError) as e:
            self.notes.append("%s not summarised: %s" % (path, e))
            return None


# ---------------------------------------------------------------------------------------------
# Summary numbers
# ---------------------------------------------------------------------------------------------

def _median(values):
    v = _finite(values)
    return statistics.median(v) if v else float("nan")


def energy_total(key, values):
    """llmtrain's step records hold each step's joules (energy_j): summed. A member whose name says
    it is a running total (total, cumulative, run) is read at its last value. -> (total, how)."""
    v = _finite(values)
    if not v:
        return float("nan"), ""
    if any(w in key for w in ("total", "cumul", "run")):
        return v[-1], "cumulative"
    return sum(v), "per step"


def summarize(run):
    h, s = run.h, {}
    last = h.step_list[-1] if h.step_list else {}
    s["steps"] = last.get("step")
    s["final_loss"] = _number(last["loss"]) if "loss" in last else float("nan")
    s["min_loss"] = min(_finite(h.series("loss")[1]), default=float("nan"))
    vlast = h.val_list[-1] if h.val_list else {}
    s["val_step"] = vlast.get("step")
    s["final_val_loss"] = _number(vlast["val_loss"]) if vlast else float("nan")
    s["min_val_loss"] = min(_finite(h.series("val_loss", h.val_list)[1]), default=float("nan"))
    s["tokens"] = last.get("tokens")
    s["tok_s"] = _median(h.series("tokens_per_s")[1])
    s["mfu"] = _median(h.series("mfu")[1])
    s["ms"] = _median(h.series("ms")[1])
    s["train_s"] = sum(_finite(h.series("ms")[1])) / 1e3
    s["peak_mib"] = max(_finite(h.series("peak_mib")[1] + h.series("rss_mib")[1]), default=float("nan"))
    s["skipped"] = last.get("skipped")
    s["energy"] = {k: energy_total(k, h.series(k)[1]) for k in h.keys(lambda k: "energy" in k)}
    for r in h.totals:  # the end-of-run record: the run's joules (steps and the rest), emissions
        for k in ("energy_run_j", "emissions_g"):
            if k in r and math.isfinite(_number(r[k])) and (k != "emissions_g" or _number(r[k]) > 0):
                s["energy"][k] = (_number(r[k]), "run")
    comm = h.keys(lambda k: k.startswith(COMM_PREFIX))
    s["split"] = {k: statistics.mean(_finite(h.series(k)[1]) or [float("nan")]) for k in comm}
    s["stopped_by"] = ", ".join("%s at step %s" % (r["stopped_by"], r.get("step")) for r in h.stops)
    return s


def fmt(v, digits=4):
    if v is None:
        return "–"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        if abs(v) >= 1e5 or (v != 0 and abs(v) < 1e-3):
            return "%.*g" % (digits, v)
        return "%.*f" % (digits, v) if abs(v) < 100 else "%.0f" % v
    return str(v)


def fmt_unit(v, digits, unit):
    text = fmt(v, digits)
    return text if text == "–" else text + unit


def loss_text(v):
    """A loss exactly as metrics.jsonl holds it (shortest round-trip form), for tables that
    scripts compare."""
    return repr(v) if isinstance(v, float) and math.isfinite(v) else "–"


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


# ---------------------------------------------------------------------------------------------
# The document: blocks rendered as Markdown or HTML
# ---------------------------------------------------------------------------------------------

def run_label(run):
    return getattr(run, "label", None) or os.path.basename(os.path.normpath(run.dir))


def _value_text(v):
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return ".true." if v else ".false."
    if isinstance(v, tuple):
        return ", ".join(_value_text(x) for x in v)
    if isinstance(v, str):
        return "'%s'" % v
    return str(v)


def differing_keys(runs):
    """The namelist keys whose values differ between the runs that have a namelist."""
    known = [r for r in runs if r.namelist]
    if len(known) < 2:
        return []
    keys = sorted(set().union(*[r.namelist for r in known]))
    return [k for k in keys if len({repr(r.namelist.get(k)) for r in known}) > 1]


def _provenance_rows(run):
    rows = []
    for k, v in (run.run_json or {}).items():
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            v = ", ".join(str(x) for x in v)
        if isinstance(v, (str, int, float)) and not isinstance(v, bool) and len(str(v)) <= 200 \
                and "\n" not in str(v):
            rows.append(["run.json: " + k, str(v)])
    return rows


def summary_rows(run, s):
    rows = [["steps", fmt(s["steps"])],
            ["final train loss", loss_text(s["final_loss"])],
            ["lowest train loss", fmt(s["min_loss"])],
            ["final validation loss", loss_text(s["final_val_loss"])
             + (" (step %s)" % s["val_step"] if s["val_step"] is not None else "")],
            ["lowest validation loss", fmt(s["min_val_loss"])],
            ["tokens seen", fmt(s["tokens"])],
            ["tokens/s (median)", fmt(s["tok_s"], 1)],
            ["MFU (median)", fmt_unit(100.0 * s["mfu"], 2, " %")],
            ["ms per step (median)", fmt(s["ms"], 1)],
            ["training time (sum of step times)", fmt_unit(s["train_s"], 1, " s")],
            ["peak memory, rank 0", fmt_unit(s["peak_mib"], 1, " MiB")],
            ["skipped steps", fmt(s["skipped"])]]
    for k, v in s["split"].items():
        rows.append(["mean %s per step" % k, fmt_unit(v, 2, " ms")])
    for k, (total, how) in s["energy"].items():
        rows.append(["%s (%s)" % (k, {"cumulative": "last value", "run": "end of run"}.get(how, "sum over steps")),
                     fmt(total)])
    if s["stopped_by"]:
        rows.append(["stopped by", s["stopped_by"]])
    rows.append(["namelist from", run.namelist_source or "(none found)"])
    return rows + _provenance_rows(run)


def _events_rows(run):
    rows = []
    records = run.h.events + run.h.restarts + [c for c in run.h.checkpoints if c.get("failed")]
    for r in sorted(records, key=lambda r: r.get("step") if isinstance(r.get("step"), int) else -1):
        what = r.get("event") or ("checkpoint failed" if "checkpoint" in r else "weights failed" if "weights" in r
                                  else next((k for k in r if k != "step"), "record"))
        rest = {k: v for k, v in r.items() if k not in ("step", "event", "superseded")}
        rows.append([fmt(r.get("step")), str(what), json.dumps(rest)[:300]])
    return rows


def trace_blocks(tr):
    if not tr:
        return []
    out = [("h", 3, "Trace (trace.json)"),
           ("p", "Span of the trace: %.1f ms. Busy: the union of a rank's events other than the step frames "
                 "(communication: the part in comm events — waits, all-reduces, sends, receives; compute: the "
                 "rest); idle: the rest of the rank's steps (of the whole span without step frames)."
            % tr["span_ms"]),
           ("table", ["rank", "events", "busy ms", "idle ms", "busy %", "compute ms", "comm ms", "process"],
            [[str(r["rank"]), str(r["events"]), fmt(r["busy_ms"], 1), fmt(r["idle_ms"], 1), fmt(r["busy_pct"], 1),
              fmt(r["compute_ms"], 1), fmt(r["comm_ms"], 1), r["name"]] for r in tr["ranks"]]),
           ("table", ["event", "count", "total ms", "mean ms", "ranks"],
            [[n["name"], str(n["count"]), fmt(n["total_ms"], 1), fmt(n["mean_ms"], 3), str(n["ranks"])]
             for n in tr["names"][:30]])]
    return out


def run_blocks(run, s, plots, level):
    blocks = [("h", level, "Run %s" % run_label(run)), ("p", "Directory: %s" % run.dir)]
    blocks += [("p", "Note: " + n) for n in run.notes]
    blocks.append(("table", ["", "value"], summary_rows(run, s)))
    ev = _events_rows(run)
    if ev:
        blocks += [("h", level + 1, "Events"), ("table", ["step", "event", "details"], ev)]
    if run.h.totals:
        blocks += [("h", level + 1, "End-of-run records"),
                   ("table", ["step", "record"], [[fmt(r.get("step")), json.dumps({k: v for k, v in r.items()
                                                                                    if k != "step"})[:400]]
                                                  for r in run.h.totals])]
    blocks += trace_blocks(run.trace)
    blocks += [("img", title, path) for title, path in plots]
    return blocks


def comparison_blocks(runs, sums, plots):
    head = ["run", "steps", "final loss", "final val loss", "lowest val loss", "tokens/s (median)", "MFU (median)",
            "peak MiB"]
    energy_keys = sorted(set().union(*[s["energy"].keys() for s in sums]))
    head += energy_keys
    rows = []
    for r, s in zip(runs, sums):
        rows.append([run_label(r), fmt(s["steps"]), loss_text(s["final_loss"]), loss_text(s["final_val_loss"]),
                     fmt(s["min_val_loss"]), fmt(s["tok_s"], 1),
                     fmt_unit(100.0 * s["mfu"], 2, " %"), fmt(s["peak_mib"], 1)]
                    + [fmt(s["energy"][k][0]) if k in s["energy"] else "–" for k in energy_keys])
    blocks = [("h", 2, "Comparison"), ("table", head, rows)]
    diff = differing_keys(runs)
    missing = [run_label(r) for r in runs if not r.namelist]
    if diff:
        blocks += [("h", 3, "Namelist keys that differ"),
                   ("table", ["key"] + [run_label(r) for r in runs],
                    [[k] + [_value_text(r.namelist.get(k)) if r.namelist else "(no namelist)" for r in runs]
                     for k in diff])]
    elif len(runs) - len(missing) >= 2:
        blocks.append(("p", "The namelists of these runs do not differ."))
    if missing:
        blocks.append(("p", "No namelist found for: %s (no run.json, no checkpoint or weights file "
                            "with its configuration)." % ", ".join(missing)))
    blocks += [("img", title, path) for title, path in plots]
    return blocks


def _md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks, out_path):
    base = os.path.dirname(os.path.abspath(out_path))
    lines = []
    for b in blocks:
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p" and b[1]:
            lines += [b[1], ""]
        elif b[0] == "table":
            lines.append("| " + " | ".join(_md_cell(c) for c in b[1]) + " |")
            lines.append("|" + "|".join("---" for _ in b[1]) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2]]
            lines.append("")
        elif b[0] == "img":
            lines += ["![%s](%s)" % (b[1], os.path.relpath(b[2], base)), ""]
    return "\n".join(lines)


def render_html(blocks, title):
    parts = ["<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>" % html.escape(title),
             "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #bbb;padding:2px 8px;"
             "text-align:left}img{max-width:100%}</style></head><body>"]
    for b in blocks:
        if b[0] == "h":
            parts.append("<h%d>%s</h%d>" % (b[1], html.escape(b[2]), b[1]))
        elif b[0] == "p" and b[1]:
            parts.append("<p>%s</p>" % html.escape(b[1]))
        elif b[0] == "table":
            parts.append("<table><tr>%s</tr>" % "".join("<th>%s</th>" % html.escape(str(c)) for c in b[1]))
            parts += ["<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(str(c)) for c in row) for row in b[2]]
            parts.append("</table>")
        elif b[0] == "img":
            with open(b[2], "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            parts.append("<figure><img alt=\"%s\" src=\"data:image/png;base64,%s\"></figure>"
                         % (html.escape(b[1]), data))
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------

def parse_args(args):
    dirs, out = [], None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--out":
            if i + 1 >= len(args):
                raise UserError("--out needs a file name (report.md or report.html)")
            out, i = args[i + 1], i + 2
            continue
        if a.startswith("--out="):
            out = a[len("--out="):]
        elif a.startswith("-"):
            raise UserError("unknown option %s\n%s" % (a, USAGE))
        else:
            dirs.append(a)
        i += 1
    if not dirs:
        raise UserError("no run directory given\n" + USAGE)
    if out is None:
        out = os.path.join(dirs[0], "report.md") if len(dirs) == 1 else "report.md"
    if not out.lower().endswith((".md", ".html", ".htm")):
        raise UserError("--out %s: the report is Markdown (.md) or HTML (.html)" % out)
    return dirs, out


def _labels(runs):
    """Each run's directory name, or its path where two runs share a name."""
    names = [os.path.basename(os.path.normpath(r.dir)) for r in runs]
    for r, n in zip(runs, names):
        r.label = n if names.count(n) == 1 else os.path.normpath(r.dir)


def _folder_name(label):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"


def write_report(dirs, out):
    runs = [Run(d) for d in dirs]
    _labels(runs)
    sums = [summarize(r) for r in runs]
    plt, why = load_pyplot()
    files = os.path.splitext(out)[0] + "_files"
    is_html = out.lower().endswith((".html", ".htm"))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        blocks = [("h", 1, "llmtrain report: " + ", ".join(run_label(r) for r in runs))]
        if why:
            blocks.append(("p", why))
        if len(runs) > 1:
            cmp_plots = compare_plots(plt, runs, files) if plt else []
            blocks += comparison_blocks(runs, sums, cmp_plots)
        n_plots = 0
        for i, (r, s) in enumerate(zip(runs, sums)):
            folder = files if len(runs) == 1 else \
                os.path.join(files, "%d_%s" % (i + 1, _folder_name(run_label(r))))
            plots = run_plots(plt, r, folder) if plt else []
            n_plots += len(plots)
            blocks += run_blocks(r, s, plots, 2)
        text = render_html(blocks, blocks[0][2]) if is_html else render_markdown(blocks, out)
        tmp = out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        raise UserError("%s: cannot write the report: %s" % (e.filename or out, e.strerror or e))
    return out, files if plt else None, why


def main(argv):
    args = argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__.split("\nWhy Python")[0].strip())
        return EXIT_OK
    try:
        dirs, out = parse_args(args)
        out, files, why = write_report(dirs, out)
    except UserError as e:
        print("llmreport: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USER
    if why:
        print("llmreport: %s" % why)
    print("llmreport: wrote %s%s" % (out, " (plots in %s/)" % files if files else ""))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
