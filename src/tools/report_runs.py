"""report_runs — llmreport's reading of a run directory and its summary numbers: metrics.jsonl
with resumes and torn lines (History), run.json, the namelist from the run or its checkpoints,
trace.json (communication and frame time), the Run that holds them, and summarize (medians,
energy, the numbers the tables show). Uses: nml.py. Used by: report_plots, report_doc, llmreport.
"""

import glob
import json
import math
import os
import re
import statistics

import nml as nl  # llmtrain's namelist reader, beside this file

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
