#!/usr/bin/env python3
"""llmscale — strong and weak scaling studies of one llmtrain model over a list of process grids.

    ./llmscale BASE.nml --grids 1x1x1,2x1x1,1x1x2 [--mode strong|weak] [--steps 10] [--warmup 3]
               [--out DIR] [--launcher auto|mpirun|srun] [--peak-flops X] ...
    ./llmscale BASE.nml --ranks 1,2,4 ...     the same with grids dp = N / (tp * pp), the base's tp, pp
    ./llmscale --report --out DIR             rewrite the table and the plot of a study
    ... --predict M.nml                       beside each measured row, the step time that
                                              `llmtrain --plan run.nml --machine M.nml` predicts

Each grid (DPxTPxPP, the order of &parallel dp, tp, pp) is one run of the base namelist for --steps
steps: an srun job step inside the Slurm allocation (--exclusive: it gets its CPUs to itself, one
run at a time; --step-share overlap when llmscale itself runs inside a step that holds them; on
ceil(R / ranks per node) nodes, so nodes fill before more are used), or, outside Slurm,
`$MPIRUN -np R` (default mpirun). Strong scaling keeps the base's global batch
(micro_batch is lowered where micro_batch x dp would not divide it); weak scaling scales it with dp
(global_batch = base global_batch / base dp x dp). Every run gets the same `&log peak_flops`: the
value of --peak-flops, else the hardware peak per rank that a 0-step calibration run of the first
grid reports ("MFU reference" line), so the MFU of every row is against one reference.

From each run's metrics.jsonl (rank 0's step records) llmscale takes the medians over the steps
after --warmup of tokens/s, step time and its split (tp all-reduce, pipeline wait, dp wait, and
the rest, compute), the MFU, and the highest peak_mib; speedup = tokens/s over the reference row's
(the fewest ranks), ideal = ranks / reference ranks, efficiency = speedup / ideal. Output in DIR:
results.md, results.csv, scaling.png, study.json (the state: a rerun skips the runs that finished,
runs the failed and missing ones), runs/<grid>/ (run.nml, run.log, llmtrain's run directory).
With --predict M.nml (a machine file, docs/planning.md; `llmtrain --calibrate` writes this
machine's), results.md gets a section with each row's predicted step time, predicted / measured,
and whether the grid has more ranks than the machine has devices (oversubscribed), also written
to predictions.csv.

Python, like llmsweep (an orchestrator, not the training path). It imports from its own folder
nml.py, the namelist reader and writer, and llmsweep.py for the launcher's command line, the
state file's read and atomic write, the keys of a run that only measures (NO_SAVES) and the
one-line failure reason of a log.

Exit codes: 0 every run finished; 1 the study finished but some runs failed (rows with their exit
code and log; the summary names them); 2 bad arguments or a base namelist that no grid can start
(one message); 75 stopped by SIGTERM / SIGINT (the finished rows are kept: run it again).
"""
import argparse
import csv
import hashlib
import io
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmsweep as sw  # noqa: E402  (the module beside this one)
from nml import format_value, namelist_value, namelist_with, overrides_text, read_namelist_file  # noqa: E402

EXIT_OK, EXIT_FAILED_RUNS, EXIT_USER, EXIT_STOPPED = 0, 1, 2, 75
STATE_FORMAT, STATE_VERSION = "llmscale-study", 1
UserError = sw.UserError
LOG_MARK = "== llmscale"
# the trainer's startup line (src/train/trainer.c): "MFU reference: hardware peak 126.6 GFLOP/s per
# rank (how); best GEMM ..."
PEAK_LINE = re.compile(r"MFU reference: hardware peak ([0-9.]+) GFLOP/s per rank \((.*)\); best GEMM")
# step records of metrics.jsonl: the time split (ms) and what the table calls it
SPLIT = (("ms_tp", "tp_ms"), ("ms_pp_wait", "pp_wait_ms"), ("ms_dp_wait", "dp_wait_ms"))
CSV_COLUMNS = ("grid", "dp", "tp", "pp", "ranks", "global_batch", "micro_batch", "status", "exit_code",
               "steps_measured", "tokens_per_s", "step_ms", "compute_ms", "tp_ms", "pp_wait_ms",
               "dp_wait_ms", "peak_mib", "mfu", "speedup", "ideal", "efficiency", "log", "reason")


# ---------------------------------------------------------------------------------------------
# The plan: one run per grid, with its global and micro batch.
# ---------------------------------------------------------------------------------------------

def grid_label(g):
    return "dp%d-tp%d-pp%d" % g


def parse_grids(text):
    grids = []
    for word in text.split(","):
        parts = word.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise UserError("--grids: '%s' is not DPxTPxPP (three positive integers, e.g. 2x1x1)" % word.strip())
        g = tuple(int(p) for p in parts)
        if g in grids:
            raise UserError("--grids: %s is given twice" % word.strip())
        grids.append(g)
    return grids


def parse_ranks(text, tp, pp):
    grids = []
    for word in text.split(","):
        w = word.strip()
        if not w.isdigit() or int(w) < 1:
            raise UserError("--ranks: '%s' is not a positive integer" % w)
        n = int(w)
        if n % (tp * pp):
            raise UserError("--ranks: %d ranks is not a multiple of the base's tp x pp = %d x %d "
                            "(give --grids DPxTPxPP instead)" % (n, tp, pp))
        g = (n // (tp * pp), tp, pp)
        if g in grids:
            raise UserError("--ranks: %d is given twice" % n)
        grids.append(g)
    return grids


def base_int(nl, group, key, default):
    v = namelist_value(nl, group, key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise UserError("%s: &%s %s = %r: a scaling study needs one integer here" % (nl.path, group, key, v))
    return v


def batches(mode, grid, base_gb, base_mb, base_dp):
    """(global_batch, micro_batch) of a run. Strong: the base's global batch, and the largest
    micro_batch <= the base's that makes micro_batch x dp divide it (else the base's: llmtrain
    then says why it cannot run). Weak: the global batch per dp rank of the base, times dp."""
    dp = grid[0]
    if mode == "weak":
        return base_gb // base_dp * dp, base_mb
    if base_mb == 0:  # llmtrain chooses the largest that fits
        return base_gb, 0
    mb = next((m for m in range(base_mb, 0, -1) if base_gb % (m * dp) == 0), base_mb)
    return base_gb, mb


def plan_runs(args, base):
    dp0 = base_int(base, "parallel", "dp", 1)
    tp0 = base_int(base, "parallel", "tp", 1)
    pp0 = base_int(base, "parallel", "pp", 1)
    mb0 = base_int(base, "train", "micro_batch", 4)
    gb0 = base_int(base, "train", "global_batch", 0) or mb0 * dp0
    if gb0 <= 0:
        raise UserError("%s: &train micro_batch = 0 needs a global_batch for a scaling study" % base.path)
    grids = parse_grids(args.grids) if args.grids else parse_ranks(args.ranks, tp0, pp0)
    runs = []
    for g in grids:
        gb, mb = batches(args.mode, g, gb0, mb0, dp0)
        runs.append({"grid": grid_label(g), "dp": g[0], "tp": g[1], "pp": g[2], "ranks": g[0] * g[1] * g[2],
                     "global_batch": gb, "micro_batch": mb})
    return runs, gb0


# ---------------------------------------------------------------------------------------------
# Running: namelists, commands, the calibration of the MFU reference.
# ---------------------------------------------------------------------------------------------

def default_trainer():
    """$LLMTRAIN_HOME/bin/llmtrain, else llmtrain on PATH, else ./llmtrain (a build tree)."""
    home = os.environ.get("LLMTRAIN_HOME")
    if home:
        return os.path.join(home, "bin", "llmtrain")
    return shutil.which("llmtrain") or "./llmtrain"


class Study:
    def __init__(self, args, base):
        self.args, self.base = args, base
        self.dir = args.out
        self.runs_dir = os.path.join(self.dir, "runs")
        self.state_path = os.path.join(self.dir, "study.json")
        self.runs, self.base_gb = plan_runs(args, base)
        self.launcher = sw.auto_launcher() if args.launcher == "auto" else args.launcher
        self.trainer = shlex.split(args.trainer or default_trainer())
        self.extra = shlex.split(args.launcher_args)
        self.current = None       # the Popen of the run in progress
        self.stop_signal = None
        self._check_allocation()
        self.doc = self._load_state()

    def _check_allocation(self):
        if self.launcher != "srun":
            return
        ntasks = sw._int_env("SLURM_NTASKS") or sw._int_env("SLURM_NPROCS")
        big = max(self.runs, key=lambda r: r["ranks"])
        if ntasks and big["ranks"] > ntasks:
            raise UserError("grid %s needs %d ranks, but this Slurm allocation has %d tasks (SLURM_NTASKS)"
                            % (big["grid"], big["ranks"], ntasks))

    def identity(self):
        """What the recorded rows depend on: a rerun with another base, mode or steps would mix
        rows of two studies."""
        a = self.args
        return {"base": os.path.abspath(a.base), "base_sha256": hashlib.sha256(
            self.base.text.encode("utf-8", "surrogateescape")).hexdigest(), "mode": a.mode, "steps": a.steps}

    def settings(self):
        """What the table's header says (--report reads it back)."""
        a = self.args
        return {"base": a.base, "mode": a.mode, "steps": a.steps, "warmup": a.warmup, "launcher": self.launcher,
                "base_global_batch": self.base_gb, "base_dp": base_int(self.base, "parallel", "dp", 1),
                "grids": [r["grid"] for r in self.runs]}

    def _load_state(self):
        fresh = {"format": STATE_FORMAT, "version": STATE_VERSION, "identity": self.identity(),
                 "settings": self.settings(), "created": sw.now_iso(), "peak_flops": None,
                 "peak_source": "", "rows": {}}
        if not os.path.exists(self.state_path):
            return fresh
        doc = read_state(self.state_path)
        done = [k for k, r in doc["rows"].items() if r.get("status") == "ok"]
        old, new = doc.get("identity", {}), self.identity()
        changed = [k for k in new if old.get(k) != new[k]]
        if changed and done:
            k = changed[0]
            raise UserError("%s holds a study with another %s (%s, now %s): its %d finished rows would not "
                            "compare with these; use another --out or move it away"
                            % (self.dir, k, old.get(k), new[k], len(done)))
        if changed:
            doc["identity"] = new
        doc["settings"] = self.settings()
        peak = self.args.peak_flops
        if peak and doc.get("peak_flops") and done and not math.isclose(peak, doc["peak_flops"], rel_tol=1e-12):
            raise UserError("--peak-flops %g: the %d finished rows of %s were measured against &log peak_flops "
                            "= %g; use that value or another --out" % (peak, len(done), self.dir, doc["peak_flops"]))
        return doc

    def save(self):
        sw.write_state_file(self.state_path, self.doc)

    # ---- one run ---------------------------------------------------------------------------

    def overrides(self, run, steps, peak):
        o = {("run", "out_dir"): self.runs_dir, ("run", "name"): run["grid"], ("run", "mode"): "train",
             ("parallel", "dp"): run["dp"], ("parallel", "tp"): run["tp"], ("parallel", "pp"): run["pp"],
             ("train", "max_steps"): steps, ("train", "global_batch"): run["global_batch"],
             ("train", "micro_batch"): run["micro_batch"], ("log", "jsonl"): True}
        # no checkpoints, weights or validation: a scaling run times training steps only
        o.update(sw.NO_SAVES)
        o[("data", "val_files")] = ""
        sw.clear_checkpoint_dir(self.base, o)
        if peak:
            o[("log", "peak_flops")] = float(peak)
        return o

    def command(self, run, nml):
        share, nodes, per_node = "--" + self.args.step_share, 0, 0
        if self.launcher == "srun":
            # fill nodes before using more: a step would otherwise spread over all of the job's
            per_node = self.args.ranks_per_node or sw._slurm_tasks_per_node()
            nodes = -(-run["ranks"] // per_node) if per_node else 0
        return (sw.launcher_argv(self.launcher, run["ranks"], "llmscale-" + run["grid"], share, nodes=nodes,
                                 tasks_per_node=per_node, mpirun=os.environ.get("MPIRUN") or "mpirun")
                + self.extra + self.trainer + [nml])

    def execute(self, run, steps, peak, run_dir, why):
        """Write the run's namelist, run it, return (exit code, log path, namelist path). The run
        directory is llmscale's: it is emptied first (llmtrain refuses an older run's files)."""
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        o = self.overrides(run, steps, peak)
        nml = os.path.join(run_dir, "run.nml")
        header = ("! %s - written by llmscale (%s) from %s with these keys set:\n!   %s\n"
                  % (nml, why, self.args.base, overrides_text(o)))
        sw.atomic_write(nml, namelist_with(self.base, o, header))
        argv = self.command(run, nml)
        log_path = os.path.join(run_dir, "run.log")
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("%s %s: %s: %s\n" % (LOG_MARK, sw.now_iso(), why, sw.command_text(argv)))
            log.flush()
            try:
                self.current = sw.start_child(argv, log)
            except OSError as e:
                raise UserError("the run command cannot start: %s: %s (command: %s)"
                                % (argv[0], e.strerror or e, " ".join(argv)))
            rc = self.current.wait()
            self.current = None
        return rc, log_path, nml

    def calibrate(self):
        """The MFU reference of the whole study: --peak-flops, the value recorded by an earlier
        llmscale in this directory, or the hardware peak per rank that a 0-step run reports (the
        first grid that starts)."""
        if self.args.peak_flops:
            self.doc["peak_flops"] = self.args.peak_flops
            self.doc["peak_source"] = "--peak-flops"
            return
        if self.doc.get("peak_flops"):
            return
        first_error = None
        for run in self.runs:
            d = os.path.join(self.dir, "calibration")
            rc, log, _ = self.execute(run, 0, None, os.path.join(d, run["grid"]), "calibration: 0 steps")
            if self.stop_signal is not None:
                return
            found = read_peak(log)
            if rc == 0 and found:
                gflops, how = found
                self.doc["peak_flops"] = float(round(gflops * 1e9))  # the line's 0.1 GFLOP/s, exactly
                self.doc["peak_source"] = "hardware peak per rank of a 0-step run on %s: %s" % (run["grid"], how)
                print("llmscale: MFU reference %.1f GFLOP/s per rank (%s); every run gets &log peak_flops = %s"
                      % (gflops, self.doc["peak_source"], format_value(self.doc["peak_flops"])), flush=True)
                return
            why = ("exit %d: %s" % (rc, sw._log_reason(log, LOG_MARK) or "no output") if rc
                   else "no 'MFU reference' line")
            print("llmscale: calibration on %s failed (%s; log %s)" % (run["grid"], why, log), flush=True)
            first_error = first_error or "%s: %s; log %s" % (run["grid"], why, log)
        raise UserError("no grid of the study can run the base %s for 0 steps to measure the MFU reference "
                        "(first: %s); fix the base or give --peak-flops" % (self.args.base, first_error))

    def run_one(self, run):
        run_dir = os.path.join(self.runs_dir, run["grid"])
        t0 = time.time()
        print("llmscale: %s: %d ranks, global batch %d, micro batch %d, %d steps"
              % (run["grid"], run["ranks"], run["global_batch"], run["micro_batch"], self.args.steps), flush=True)
        rc, log, nml = self.execute(run, self.args.steps, self.doc["peak_flops"], run_dir, "run")
        row = dict(run, exit_code=rc, log=log, nml=nml, wall_s=round(time.time() - t0, 3), finished=sw.now_iso())
        if self.stop_signal is not None:
            return None
        stats, why = collect(os.path.join(run_dir, "metrics.jsonl"), self.args.warmup)
        if rc != 0:
            killed = "killed by signal %d" % -rc if rc < 0 else "exit %d" % rc
            row.update(status="failed", reason=killed + ": " + (sw._log_reason(log, LOG_MARK) or "no output"))
        elif stats is None:
            row.update(status="failed", reason=why)
        else:
            row.update(status="ok", reason="", stats=stats)
        print("llmscale: %s: %s (%.1f s)%s" % (run["grid"], row["status"], row["wall_s"],
                                               "" if row["status"] == "ok" else ": %s; log %s" % (row["reason"], log)),
              flush=True)
        return row

    def on_signal(self, signum, frame):
        if self.stop_signal is None:
            self.stop_signal = signum
            print("llmscale: %s: stopping the run in progress; finished rows are kept (exit %d, run again "
                  "to continue)" % (signal.Signals(signum).name, EXIT_STOPPED), flush=True)
        if self.current is not None:
            try:
                os.killpg(self.current.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def run(self):
        os.makedirs(self.runs_dir, exist_ok=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        self.calibrate()
        self.save()
        for run in self.runs:
            if self.stop_signal is not None:
                break
            old = self.doc["rows"].get(run["grid"])
            if old and old.get("status") == "ok" and all(old.get(k) == v for k, v in run.items()):
                print("llmscale: %s: finished in an earlier llmscale, kept" % run["grid"], flush=True)
                continue
            row = self.run_one(run)
            if row is not None:
                self.doc["rows"][run["grid"]] = row
                self.save()
        rows = write_results(self.dir, self.doc, self.runs, self.args.warmup, self.trainer, self.args.predict)
        if self.stop_signal is not None:
            print("llmscale: stopped by %s; state in %s (exit %d)"
                  % (signal.Signals(self.stop_signal).name, self.state_path, EXIT_STOPPED), flush=True)
            return EXIT_STOPPED
        failed = [r for r in rows if r["status"] != "ok"]
        print("llmscale: study done: %d runs, %d ok, %d failed%s; results in %s/results.md, results.csv, scaling.png"
              % (len(rows), len(rows) - len(failed), len(failed),
                 " (%s)" % ", ".join("%s exit %s" % (r["grid"], r["exit_code"]) for r in failed) if failed else "",
                 self.dir), flush=True)
        return EXIT_FAILED_RUNS if failed else EXIT_OK


def read_state(path):
    return sw.read_state_file(path, STATE_FORMAT, STATE_VERSION, "llmscale")


def read_peak(log_path):
    """(GFLOP/s, how) from the trainer's 'MFU reference' line, or None."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = PEAK_LINE.search(line)
                if m:
                    return float(m.group(1)), m.group(2)
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------
# Results: statistics of each run, the table (Markdown + CSV), the plot.
# ---------------------------------------------------------------------------------------------

def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def collect(metrics_path, warmup):
    """Medians over the step records after `warmup` steps (rank 0's): tokens/s, step ms, the time
    split, MFU; the highest peak_mib of all steps. (None, why) when there are none."""
    recs = [r for r in sw.read_metrics(metrics_path)
            if isinstance(r.get("step"), int) and _num(r.get("tokens_per_s")) and _num(r.get("ms"))]
    after = [r for r in recs if r["step"] > warmup]
    if not after:
        return None, ("no step records after the %d warm-up steps in %s (%d steps recorded)"
                      % (warmup, metrics_path, len(recs)))

    def med(key):
        vals = [float(r[key]) for r in after if _num(r.get(key))]
        return statistics.median(vals) if vals else None

    stats = {"steps_measured": len(after), "tokens_per_s": med("tokens_per_s"), "step_ms": med("ms"),
             "mfu": med("mfu")}
    comm = [sum(float(r.get(k, 0.0)) for k, _ in SPLIT if _num(r.get(k))) for r in after]
    stats["compute_ms"] = statistics.median([float(r["ms"]) - c for r, c in zip(after, comm)])
    for key, name in SPLIT:
        stats[name] = med(key)
    peaks = [float(r["peak_mib"]) for r in recs if _num(r.get("peak_mib"))]
    stats["peak_mib"] = max(peaks) if peaks else None
    return stats, ""


def table_rows(doc, runs, warmup):
    """The rows of the grid list `runs`, in its order, with speedup and efficiency against the
    finished row with the fewest ranks."""
    rows = []
    for run in runs:
        r = doc["rows"].get(run["grid"])
        if r is None:
            r = dict(run, status="not run", exit_code=None, log="", reason="")
        r = dict(r)
        if r["status"] == "ok":  # statistics from the files, with this --warmup
            stats, why = collect(os.path.join(os.path.dirname(r["log"]), "metrics.jsonl"), warmup)
            if stats is None:
                r.update(status="failed", reason=why)
            else:
                r["stats"] = stats
        rows.append(r)
    ok = [r for r in rows if r["status"] == "ok"]
    ref = min(ok, key=lambda r: r["ranks"]) if ok else None
    for r in ok:
        s = r["stats"]
        s["speedup"] = s["tokens_per_s"] / ref["stats"]["tokens_per_s"]
        s["ideal"] = r["ranks"] / ref["ranks"]
        s["efficiency"] = s["speedup"] / s["ideal"]
    return rows, ref


def _fmt(v, spec):
    return "" if v is None else spec % v


def write_csv(out_dir, rows):
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        s = r.get("stats") or {}
        vals = {"grid": r["grid"], "dp": r["dp"], "tp": r["tp"], "pp": r["pp"], "ranks": r["ranks"],
                "global_batch": r["global_batch"], "micro_batch": r["micro_batch"], "status": r["status"],
                "exit_code": "" if r.get("exit_code") is None else r["exit_code"], "log": r.get("log", ""),
                "reason": r.get("reason", ""), "steps_measured": s.get("steps_measured", "")}
        for k in ("tokens_per_s", "step_ms", "compute_ms", "tp_ms", "pp_wait_ms", "dp_wait_ms", "peak_mib"):
            vals[k] = _fmt(s.get(k), "%.3f")
        for k in ("mfu", "speedup", "ideal", "efficiency"):
            vals[k] = _fmt(s.get(k), "%.6f")
        w.writerow([vals[c] for c in CSV_COLUMNS])
    sw.atomic_write(os.path.join(out_dir, "results.csv"), out.getvalue())


def write_markdown(out_dir, doc, rows, ref, warmup):
    a = doc["settings"]
    peak, gb = doc.get("peak_flops"), a["base_global_batch"]
    batch = ("global batch fixed at %d sequences" % gb if a["mode"] == "strong"
             else "global batch = %d sequences per dp rank x dp" % (gb // a["base_dp"]))
    lines = ["# Scaling study of %s: %s scaling" % (a["base"], a["mode"]), "",
             "- %s; %d steps per run; medians over steps %d..%d (warm-up: %d step%s)"
             % (batch, a["steps"], warmup + 1, a["steps"], warmup, "" if warmup == 1 else "s"),
             "- MFU reference: %s GFLOP/s per rank (%s), the same `&log peak_flops = %s` in every run's namelist"
             % (_fmt(peak and peak / 1e9, "%.1f") or "none", doc.get("peak_source") or "not measured",
                format_value(float(peak)) if peak else "0"),
             "- speedup = tokens/s / tokens/s of %s; ideal = ranks / %s; efficiency = speedup / ideal"
             % ((ref["grid"], "%d" % ref["ranks"]) if ref else ("the row with the fewest ranks", "its ranks")),
             "- times are rank 0's (ms per step, each column its own median): compute = step - tp all-reduce - "
             "pipeline wait - dp wait; peak MiB: rank 0's tracked buffers, the highest of all steps", "- launcher: %s" % a["launcher"], "",
             "| grid (dp x tp x pp) | ranks | global batch | micro batch | tokens/s | step ms | compute ms | "
             "tp ms | pp wait ms | dp wait ms | peak MiB | MFU % | speedup | ideal | efficiency |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        s = r.get("stats")
        head = "| %dx%dx%d | %d | %d | %d |" % (r["dp"], r["tp"], r["pp"], r["ranks"], r["global_batch"],
                                              r["micro_batch"])
        if not s:
            what = r["status"] + ("" if r.get("exit_code") is None else " (exit %s)" % r["exit_code"])
            lines.append(head + " %s |%s" % (what, " |" * 10))
            continue
        lines.append(head + " %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %.2f | %.2f | %.2f |"
                     % (s["tokens_per_s"], s["step_ms"], s["compute_ms"], s["tp_ms"] or 0, s["pp_wait_ms"] or 0,
                        s["dp_wait_ms"] or 0, _fmt(s["peak_mib"], "%.1f"), _fmt(s["mfu"] and 100 * s["mfu"], "%.1f"),
                        s["speedup"], s["ideal"], s["efficiency"]))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "Runs without a result:", ""]
        lines += ["- %s: %s%s" % (r["grid"], r.get("reason") or r["status"],
                                  " (log %s)" % r["log"] if r.get("log") else "") for r in failed]
    sw.atomic_write(os.path.join(out_dir, "results.md"), "\n".join(lines) + "\n")


def write_plot(out_dir, doc, rows, ref):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("llmscale: no scaling.png: matplotlib is not installed (Debian: python3-matplotlib)", flush=True)
        return
    ok = [r for r in rows if r["status"] == "ok"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    if ok:
        xs = [r["ranks"] for r in ok]
        lo, hi = min(xs), max(xs)
        ax1.plot([lo, hi], [lo / ref["ranks"], hi / ref["ranks"]], "k--", lw=1, label="ideal")
        ax2.plot([lo, hi], [1.0, 1.0], "k--", lw=1, label="ideal")
        # one marker per grid: grids of the same size (2x1x1, 1x1x2) sit at the same x
        for i, r in enumerate(ok):
            style = dict(marker="osD^v<>ph*"[i % 10], color="C%d" % (i % 10), zorder=3, label=r["grid"])
            ax1.scatter([r["ranks"]], [r["stats"]["speedup"]], **style)
            ax2.scatter([r["ranks"]], [r["stats"]["efficiency"]], **style)
        if hi / lo >= 8:
            for ax in (ax1, ax2):
                ax.set_xscale("log", base=2)
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=8)
    ax1.set_xlabel("ranks")
    ax1.set_ylabel("speedup (tokens/s / reference)")
    ax2.set_xlabel("ranks")
    ax2.set_ylabel("parallel efficiency")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    failed = [r["grid"] for r in rows if r["status"] != "ok"]
    fig.suptitle("%s scaling of %s%s" % (doc["settings"]["mode"], os.path.basename(doc["settings"]["base"]),
                                         " (no result: %s)" % ", ".join(failed) if failed else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "scaling.png"), dpi=100)
    plt.close(fig)


def predict(trainer, machine, rows):
    """The performance model's prediction of each finished row: `llmtrain --plan run.nml --machine
    M --json` on the row's own namelist (rows without one, or refused, get the reason)."""
    import json
    import subprocess
    out = []
    for r in rows:
        if r["status"] != "ok":
            continue
        nml = os.path.join(os.path.dirname(r["log"]), "run.nml")
        p = subprocess.run(trainer + ["--plan", nml, "--machine", machine, "--json"], capture_output=True, text=True)
        measured = r["stats"]["step_ms"]
        try:
            j = json.loads(p.stdout)
            ms = 1e3 * j["step_s"]
            out.append({"grid": r["grid"], "ranks": r["ranks"], "measured_ms": measured, "predicted_ms": ms,
                        "ratio": ms / measured, "oversubscribed": j["oversubscribed"], "reason": ""})
        except (ValueError, KeyError):
            out.append({"grid": r["grid"], "ranks": r["ranks"], "measured_ms": measured, "predicted_ms": None,
                        "ratio": None, "oversubscribed": None,
                        "reason": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]})
    return out


def write_predictions(out_dir, machine, preds):
    """predictions.csv, and a section of results.md."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["grid", "ranks", "measured_ms", "predicted_ms", "ratio", "oversubscribed", "reason"])
    for q in preds:
        w.writerow([q["grid"], q["ranks"], "%.3f" % q["measured_ms"], _fmt(q["predicted_ms"], "%.3f"),
                    _fmt(q["ratio"], "%.4f"), "" if q["oversubscribed"] is None else int(q["oversubscribed"]),
                    q["reason"]])
    sw.atomic_write(os.path.join(out_dir, "predictions.csv"), buf.getvalue())
    lines = ["", "## Predicted by the performance model (`llmtrain --plan run.nml --machine %s`)" % machine, "",
             "| grid (dp x tp x pp) | ranks | measured step ms | predicted step ms | predicted / measured | oversubscribed |",
             "|---|--:|--:|--:|--:|---|"]
    for q in preds:
        if q["predicted_ms"] is None:
            lines.append("| %s | %d | %.2f | %s | | |" % (q["grid"], q["ranks"], q["measured_ms"], q["reason"]))
            continue
        lines.append("| %s | %d | %.2f | %.2f | %.2f | %s |" % (q["grid"], q["ranks"], q["measured_ms"],
                                                            q["predicted_ms"], q["ratio"],
                                                            "yes" if q["oversubscribed"] else "no"))
    with open(os.path.join(out_dir, "results.md"), "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_results(out_dir, doc, runs, warmup, trainer=None, machine=None):
    rows, ref = table_rows(doc, runs, warmup)
    write_csv(out_dir, rows)
    write_markdown(out_dir, doc, rows, ref, warmup)
    write_plot(out_dir, doc, rows, ref)
    if machine:
        write_predictions(out_dir, machine, predict(trainer, machine, rows))
    return rows


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """Bad arguments: one line and exit 2 (argparse would print the usage first)."""
        print("llmscale: %s (llmscale --help)" % message, file=sys.stderr, flush=True)
        sys.exit(EXIT_USER)


def parse_args(argv):
    p = _Parser(prog="llmscale", description="Strong and weak scaling studies of one llmtrain model "
                "over process grids (docs/llmscale.md).")
    p.add_argument("base", nargs="?", help="the base namelist")
    p.add_argument("--grids", help="DPxTPxPP,... (the order of &parallel dp, tp, pp), e.g. 1x1x1,2x1x1,1x1x2")
    p.add_argument("--ranks", help="N,... : grids of N ranks with the base's tp and pp (dp = N / (tp pp))")
    p.add_argument("--mode", choices=("strong", "weak"), default="strong",
                   help="strong: fixed global batch; weak: global batch proportional to dp [strong]")
    p.add_argument("--steps", type=int, default=10, help="training steps per run [10]")
    p.add_argument("--warmup", type=int, default=None, help="first steps left out of the medians [steps/4, at least 1]")
    p.add_argument("--out", default="scaling", help="the study directory [scaling]")
    p.add_argument("--launcher", choices=("auto", "mpirun", "srun"), default="auto",
                   help="auto: srun inside a Slurm allocation, else $MPIRUN (default mpirun) [auto]")
    p.add_argument("--launcher-args", default="", help="extra arguments for srun or mpirun (e.g. --mpi=pmix)")
    p.add_argument("--trainer", default="", help="the llmtrain program [$LLMTRAIN_HOME/bin/llmtrain, "
                   "else llmtrain on PATH, else ./llmtrain]")
    p.add_argument("--peak-flops", type=float, default=0.0,
                   help="FLOP/s per rank for MFU in every run [measured once by a 0-step run]")
    p.add_argument("--ranks-per-node", type=int, default=0, help="srun: ranks per node, a run of R ranks on "
                   "ceil(R / this) nodes [the allocation's tasks per node; mpirun: not used]")
    p.add_argument("--step-share", choices=("exclusive", "overlap"), default="exclusive",
                   help="srun --exclusive (a run's CPUs to itself) or --overlap (llmscale runs in a step) [exclusive]")
    p.add_argument("--report", action="store_true", help="rewrite results.md, results.csv, scaling.png of --out")
    p.add_argument("--predict", default="", metavar="M.nml",
                   help="a machine file: each row's predicted step time beside the measured one (docs/planning.md)")
    p.add_argument("--version", action="store_true", help="print the version")
    a = p.parse_args(argv)
    if a.version:
        return a
    if a.predict and not os.path.isfile(a.predict):
        p.error("--predict %s: no such machine file" % a.predict)
    if a.report:
        if a.base or a.grids or a.ranks:
            p.error("--report takes only --out (and --warmup, --predict, --trainer): it rewrites the results of a study")
        return a
    if not a.base:
        p.error("the base namelist is missing")
    if bool(a.grids) == bool(a.ranks):
        p.error("give one of --grids DPxTPxPP,... or --ranks N,...")
    if a.steps < 1:
        p.error("--steps %d: a run needs at least 1 step" % a.steps)
    if a.warmup is None:
        a.warmup = min(max(1, a.steps // 4), a.steps - 1)
    if not 0 <= a.warmup < a.steps:
        p.error("--warmup %d must be at least 0 and below --steps %d" % (a.warmup, a.steps))
    if not (a.peak_flops >= 0 and math.isfinite(a.peak_flops)) or a.peak_flops > 1e18:
        p.error("--peak-flops %g must be a FLOP/s per rank in (0, 1e18] (0: measure it)" % a.peak_flops)
    if a.ranks_per_node < 0:
        p.error("--ranks-per-node %d must be positive" % a.ranks_per_node)
    for opt, text in (("--launcher-args", a.launcher_args), ("--trainer", a.trainer)):
        try:
            shlex.split(text)
        except ValueError as e:
            p.error("%s: %s" % (opt, e))
    return a


def report_only(args):
    """--report: the table and plot of --out from its study.json (its grids, base and mode)."""
    path = os.path.join(args.out, "study.json")
    if not os.path.exists(path):
        raise UserError("--out %s: no study has run there yet (no study.json)" % args.out)
    doc = read_state(path)
    warmup = doc["settings"]["warmup"] if args.warmup is None else args.warmup
    if not 0 <= warmup < doc["settings"]["steps"]:
        raise UserError("--warmup %d must be at least 0 and below the study's %d steps"
                        % (warmup, doc["settings"]["steps"]))
    runs = [doc["rows"].get(g) or {"grid": g} for g in doc["settings"]["grids"]]
    rows = write_results(args.out, doc, [r for r in runs if "dp" in r], warmup,
                         shlex.split(args.trainer or default_trainer()), args.predict)
    print("llmscale: wrote %s/results.md, results.csv, scaling.png (%d rows)" % (args.out, len(rows)))
    return EXIT_OK


def main(argv):
    args = parse_args(argv[1:])
    if args.version:
        print("llmscale (llmtrain %s)" % sw._version())
        return EXIT_OK
    try:
        if args.report:
            return report_only(args)
        base = read_namelist_file(args.base)
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise UserError("--out %s: the study directory cannot be made: %s" % (args.out, e.strerror or e))
        return Study(args, base).run()
    except UserError as e:
        print("llmscale: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USER


if __name__ == "__main__":
    sys.exit(main(sys.argv))
