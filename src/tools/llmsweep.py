#!/usr/bin/env python3
"""llmsweep — hyperparameter search over llmtrain runs: grid, random and Bayesian search, ASHA
early stopping, budgets, trials as job steps of one Slurm allocation (or local mpirun), one state
file per study so a requeued study continues where it stopped.

    ./llmsweep STUDY.nml            run the study, or continue it (the state is STUDY_DIR/study.json)
    ./llmsweep --check STUDY.nml    read and check the study file, print the space and the first
                                    trial's namelist, run nothing
    ./llmsweep --report STUDY.nml   rewrite the results (results.md, results.csv, best.nml, plots)

Why Python and not C like the rest of llmtrain: this program is an orchestrator, not part of the
training path. It launches processes (srun job steps or mpirun), waits on them, keeps a JSON state
file, fits a small Gaussian process (numpy: a few hundred points at most) and draws plots
(matplotlib). None of it is performance-critical, and all of it is a fraction of the code in
Python that it would be in C. It uses only the Python standard library and numpy (Debian's
python3-numpy), and matplotlib for the plots when it is installed.

The study file is a Fortran namelist in llmtrain's syntax (read by nml.py beside this file, exactly the
grammar of src/config/namelist.c: groups, strings, logicals, numbers, repeat counts, comments),
with two groups: &sweep (the settings, SWEEP_KEYS below) and &space, whose entries name a key of
the base namelist as group.key and give its range:

    &space
      train.lr           = log(1e-4, 3e-3)     ! log-uniform real
      train.weight_decay = uniform(0, 0.2)     ! uniform real (also real(lo, hi))
      train.warmup_steps = int(0, 200)         ! uniform integer, both ends included
      train.micro_batch  = logint(1, 16)       ! log-uniform integer
      model.d_model      = {128, 256}          ! categorical: numbers, strings or logicals
    /

Each trial's namelist is the base namelist's text with the trial's keys replaced (comments and
layout kept), written as STUDY_DIR/trials/tNNNN/trial.nml; llmtrain reads it unchanged.

Exit codes: 0 the study is done (every trial ran, or a budget stopped it: it says which);
2 bad input (one message naming file:line:col and the key, the trial, or the trainer command that
cannot run); 1 the study stopped after max_failures trials failed in a row; 75 stopped by
SIGTERM / SIGINT / SIGUSR1 with the state saved (run llmsweep again to continue).
"""
import csv
import ctypes
import difflib
import hashlib
import io
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nml import (UserError, format_value, namelist_value, namelist_with,  # noqa: E402
                 overrides_text, read_namelist_file)  # the namelist reader and writer (nml.py, beside this file)

EXIT_OK, EXIT_FAILURES, EXIT_USER, EXIT_REQUEUE = 0, 1, 2, 75
STATE_FORMAT, STATE_VERSION = "llmsweep-study", 1


# ---------------------------------------------------------------------------------------------
# The study file: &sweep settings (one table: type, default, bounds, meaning) and &space.
# ---------------------------------------------------------------------------------------------

# key: (type, default, lowest value or None, help). type: 'str' 'int' 'real' 'bool' or "a|b|c".
SWEEP_KEYS = {
    "name": ("str", "sweep", None, "the study's name: its directory is out_dir/name"),
    "out_dir": ("str", "sweeps", None, "where study directories are made"),
    "base": ("str", "", None, "the base namelist every trial starts from (required)"),
    "strategy": ("grid|random|bayes", "bayes", None, "how the next trial's point is chosen"),
    "seed": ("int", 0, 0, "random draws are a function of (seed, trial number)"),
    "objective": ("str", "val_loss", None, "the metric of metrics.jsonl that is minimised"),
    "target": ("real", None, None, "stop launching once a trial's objective is <= target"),
    "n_startup": ("int", 10, 1, "bayes: trials drawn at random before the model is used"),
    "grid_points": ("int", 5, 1, "grid: values per continuous (or wide integer) dimension"),
    "max_trials": ("int", 0, 0, "trials (configurations) in the study [0: the grid's size, else 20]"),
    "max_tokens": ("real", 0.0, 0, "tokens trained by all trials together [0 = no limit]"),
    "max_node_hours": ("real", 0.0, 0, "node-hours of all trials together [0 = no limit]"),
    "max_failures": ("int", 5, 0, "stop launching after this many failed trials in a row [0 = never]"),
    "max_attempts": ("int", 3, 1, "launches of one trial segment that was interrupted (exit 75)"),
    "scheduler": ("none|asha", "none", None, "early stopping: asha (successive halving on steps)"),
    "eta": ("int", 3, 2, "asha: keep the best 1/eta of each rung"),
    "min_steps": ("int", 0, 0, "asha: the first rung's steps [0: max_steps / eta^2]"),
    "max_steps": ("int", 0, 0, "steps of a full trial [0: the base's &train max_steps]"),
    "launcher": ("auto|mpirun|srun|none", "auto", None,
                 "auto: srun inside a Slurm allocation, else mpirun; none: command runs as given"),
    "trainer": ("str", "./llmtrain", None, "the program the launcher starts"),
    "launcher_args": ("str", "", None, "extra arguments for mpirun or srun"),
    "command": ("str", "", None, "the whole trial command ({nml} {ranks} {trial} {dir}); "
                "overrides launcher/trainer [''], the namelist is appended when {nml} is absent"),
    "ranks_per_trial": ("int", 1, 1, "MPI ranks of one trial"),
    "nodes_per_trial": ("int", 0, 0, "srun --nodes of one trial [0: Slurm chooses]"),
    "ranks_per_node": ("int", 0, 0, "for node-hours [0: Slurm's tasks per node; locally "
                       "ranks_per_trial * concurrent, one node shared by all]"),
    "concurrent": ("int", 1, 1, "trials running at once"),
    "preflight": ("bool", True, None, "run the first trial's namelist for 0 steps before the study"),
    "stop_timeout_s": ("real", 120.0, 0, "after a stop signal, how long trials get to checkpoint"),
}

# keys the study sets in every trial's namelist: a &space entry for them is refused
OWNED_KEYS = {("run", "name"), ("run", "out_dir"), ("checkpoint", "resume"), ("checkpoint", "dir")}


class Dim:
    """One dimension of the space. encode() maps a value into [0, 1]^width for the model."""

    def __init__(self, name, kind, lo=None, hi=None, choices=None, pos=""):
        self.name, self.kind, self.lo, self.hi, self.choices, self.pos = name, kind, lo, hi, choices, pos
        self.group, self.key = name.split(".", 1)

    @property
    def width(self):
        return len(self.choices) if self.kind == "choice" else 1

    @property
    def is_log(self):
        return self.kind in ("log", "logint")

    def describe(self):
        if self.kind == "choice":
            return "{%s}" % ", ".join(format_value(c) for c in self.choices)
        return "%s(%s, %s)" % (self.kind, format_value(self.lo), format_value(self.hi))

    def _bounds(self):
        """The interval the unit coordinate spans: integers own [v - 1/2, v + 1/2], so every
        integer gets the same share (in log space for logint, where lo >= 1)."""
        if self.kind in ("int", "logint"):
            lo, hi = self.lo - 0.5, self.hi + 0.5
        else:
            lo, hi = self.lo, self.hi
        return (math.log(lo), math.log(hi)) if self.is_log else (lo, hi)

    def encode(self, x):
        if self.kind == "choice":
            return [1.0 if (type(c) is type(x) and c == x) else 0.0 for c in self.choices]
        lo, hi = self._bounds()
        t = ((math.log(x) if self.is_log else x) - lo) / (hi - lo)
        return [min(1.0, max(0.0, t))]

    def decode(self, u):
        """u: a sequence of width floats in [0, 1] -> the value."""
        if self.kind == "choice":
            return self.choices[max(range(len(u)), key=lambda i: u[i])]
        t = min(1.0, max(0.0, float(u[0])))
        lo, hi = self._bounds()
        x = lo + t * (hi - lo)
        x = math.exp(x) if self.is_log else x
        if self.kind in ("int", "logint"):
            return int(min(self.hi, max(self.lo, math.floor(x + 0.5))))
        return min(self.hi, max(self.lo, x))

    def sample(self, rng):
        if self.kind == "choice":
            return self.choices[int(rng.integers(len(self.choices)))]
        return self.decode([rng.random()])

    def grid(self, n):
        if self.kind == "choice":
            return list(self.choices)
        if self.kind in ("int", "logint") and self.hi - self.lo + 1 <= n:
            return list(range(self.lo, self.hi + 1))
        ts = [0.5] if n == 1 else [i / (n - 1) for i in range(n)]
        if self.kind == "uniform":
            return [self.lo + t * (self.hi - self.lo) for t in ts]
        if self.kind == "log":
            return [math.exp(math.log(self.lo) + t * (math.log(self.hi) - math.log(self.lo))) for t in ts]
        if self.kind == "int":
            vals = [int(round(self.lo + t * (self.hi - self.lo))) for t in ts]
        else:
            vals = [int(round(math.exp(math.log(self.lo) + t * (math.log(self.hi) - math.log(self.lo)))))
                    for t in ts]
        return sorted(set(vals))


def _space_dim(path, e):
    pos = "%s:%d:%d" % (path, e.line, e.col)
    parts = e.key.split(".")
    if len(parts) != 2 or not all(p and p[0].isalpha() and all(c.isalnum() or c == "_" for c in p)
                                  for p in parts):
        raise UserError("%s: &space key '%s' must be group.key, the group and key of the base "
                        "namelist (e.g. train.lr)" % (pos, e.key))
    if (parts[0], parts[1]) in OWNED_KEYS:
        raise UserError("%s: &space key '%s' is set by llmsweep for every trial (it keeps the trials' "
                        "directories and resumption apart)" % (pos, e.key))
    v = e.values[0]
    vpos = "%s:%d:%d" % (path, v.line, v.col)
    func, items = v.value
    if func == "choice":
        if not items:
            raise UserError("%s: &space key '%s': the choices {} are empty" % (vpos, e.key))
        vals = [it.value for it in items]
        for i, it in enumerate(items):
            if any(type(vals[j]) is type(it.value) and vals[j] == it.value for j in range(i)):
                raise UserError("%s:%d:%d: &space key '%s': choice %s is given twice"
                                % (path, it.line, it.col, e.key, it.raw))
        return Dim(e.key, "choice", choices=vals, pos=vpos)
    kind = "uniform" if func == "real" else func
    if len(items) != 2:
        raise UserError("%s: &space key '%s': %s(lo, hi) takes two numbers, got %d"
                        % (vpos, e.key, func, len(items)))
    for it in items:
        if it.kind not in ("integer", "real") or (kind in ("int", "logint") and it.kind != "integer"):
            raise UserError("%s:%d:%d: &space key '%s': %s(lo, hi) takes %s, got %s %s"
                            % (path, it.line, it.col, e.key, func,
                               "integers" if kind in ("int", "logint") else "numbers", it.kind, it.raw))
    lo, hi = items[0].value, items[1].value
    if kind in ("uniform", "log"):
        lo, hi = float(lo), float(hi)
    if lo >= hi:
        raise UserError("%s: &space key '%s': %s(%s, %s) is empty: lo must be below hi"
                        % (vpos, e.key, func, items[0].raw, items[1].raw))
    if kind in ("log", "logint") and lo <= 0:
        raise UserError("%s: &space key '%s': %s(%s, %s) needs lo > 0 (a logarithmic range)"
                        % (vpos, e.key, func, items[0].raw, items[1].raw))
    return Dim(e.key, kind, lo, hi, pos=vpos)


def _sweep_value(path, e, spec):
    typ = spec[0]
    pos = "%s:%d:%d" % (path, e.line, e.col)
    if len(e.values) != 1:
        raise UserError("%s: &sweep key '%s' takes one value, got %d" % (pos, e.key, len(e.values)))
    v = e.values[0]
    vpos = "%s:%d:%d" % (path, v.line, v.col)
    want = {"str": "string", "int": "integer", "real": "real", "bool": "logical"}.get(typ, "string")
    ok = v.kind == want or (want == "real" and v.kind == "integer")
    if not ok:
        raise UserError("%s: &sweep key '%s' expects a%s %s, got %s %s"
                        % (vpos, e.key, "n" if want[0] in "ai" else "", want, v.kind, v.raw))
    value = float(v.value) if want == "real" else v.value
    if "|" in typ:
        choices = typ.split("|")
        if value.lower() not in choices:
            hint = difflib.get_close_matches(value.lower(), choices, 1)
            raise UserError("%s: &sweep key '%s': '%s' is not one of %s%s"
                            % (vpos, e.key, value, ", ".join(choices),
                               "; did you mean '%s'?" % hint[0] if hint else ""))
        value = value.lower()
    lo = spec[2]
    if lo is not None and value < lo:
        raise UserError("%s: &sweep key '%s' = %s is out of range: at least %s" % (vpos, e.key, v.raw, lo))
    return value


class Study:
    """The study file read and checked: settings, space, base namelist, derived sizes."""

    def __init__(self, path):
        self.path = path
        nl = read_namelist_file(path, extended=("space",))
        self.cfg = {k: spec[1] for k, spec in SWEEP_KEYS.items()}
        self.set_at = {}
        sweep = space = None
        for g in nl.groups:
            if g.name not in ("sweep", "space"):
                hint = difflib.get_close_matches(g.name, ["sweep", "space"], 1)
                raise UserError("%s:%d:%d: unknown group '&%s' in a study file (valid groups: &sweep, "
                                "&space)%s" % (path, g.line, g.col, g.name,
                                              "; did you mean '&%s'?" % hint[0] if hint else ""))
            if (sweep if g.name == "sweep" else space) is not None:
                first = sweep if g.name == "sweep" else space
                raise UserError("%s:%d:%d: group '&%s' is given twice (first at line %d)"
                                % (path, g.line, g.col, g.name, first.line))
            if g.name == "sweep":
                sweep = g
            else:
                space = g
        if sweep is None:
            raise UserError("%s:1:1: no &sweep group: a study file needs &sweep (with base = "
                            "'the base namelist') and &space" % path)
        self.sweep_at = (sweep.line, sweep.col)
        for e in sweep.entries:
            if e.key not in SWEEP_KEYS:
                hint = difflib.get_close_matches(e.key, list(SWEEP_KEYS), 1)
                raise UserError("%s:%d:%d: unknown key '%s' in group '&sweep' (valid keys: %s)%s"
                                % (path, e.line, e.col, e.key, ", ".join(SWEEP_KEYS),
                                   "; did you mean '%s'?" % hint[0] if hint else ""))
            if e.key in self.set_at:
                raise UserError("%s:%d:%d: &sweep key '%s' is set twice (first at line %d)"
                                % (path, e.line, e.col, e.key, self.set_at[e.key][0]))
            self.cfg[e.key] = _sweep_value(path, e, SWEEP_KEYS[e.key])
            self.set_at[e.key] = (e.line, e.col)
        if space is None or not space.entries:
            where = (space.line, space.col) if space else (sweep.line, sweep.col)
            raise UserError("%s:%d:%d: the search space is empty: give at least one dimension in "
                            "&space (e.g. train.lr = log(1e-4, 3e-3))" % ((path,) + where))
        self.dims, seen = [], {}
        for e in space.entries:
            if e.key in seen:
                raise UserError("%s:%d:%d: &space key '%s' is given twice (first at line %d)"
                                % (path, e.line, e.col, e.key, seen[e.key]))
            seen[e.key] = e.line
            self.dims.append(_space_dim(path, e))
        self._check_settings(sweep)
        self.dir = os.path.join(self.cfg["out_dir"], self.cfg["name"])

    def at(self, key):
        """file:line:col of a &sweep key, or of the &sweep group where the key is left unset."""
        line, col = self.set_at.get(key, self.sweep_at)
        return "%s:%d:%d" % (self.path, line, col)

    def _check_settings(self, sweep):
        c = self.cfg
        if not c["base"]:
            raise UserError("%s:%d:%d: &sweep base is required: the namelist every trial starts from "
                            "(e.g. base = 'inputs/tiny.nml')" % (self.path, sweep.line, sweep.col))
        for key in ("name",):
            if not c[key] or "/" in c[key] or c[key] in (".", ".."):
                raise UserError("%s: &sweep %s = '%s' must be a plain directory name" % (self.at(key), key, c[key]))
        self.base = read_namelist_file(c["base"], where="%s: &sweep base" % self.at("base"))
        for d in self.dims:
            if d.kind != "choice":
                continue
            for ch in d.choices:
                if isinstance(ch, str) and "\n" in ch:
                    raise UserError("%s: &space key '%s': a choice holds a newline" % (d.pos, d.name))
        base_steps = namelist_value(self.base, "train", "max_steps", 100)
        if isinstance(base_steps, list) or not isinstance(base_steps, int):
            base_steps = 100
        self.max_steps = c["max_steps"] or base_steps
        self.steps_set = bool(c["max_steps"]) or c["scheduler"] == "asha"
        if self.steps_set and any(d.group == "train" and d.key == "max_steps" for d in self.dims):
            d = next(d for d in self.dims if d.name == "train.max_steps")
            raise UserError("%s: &space key 'train.max_steps' is set by llmsweep here (&sweep max_steps "
                            "or scheduler = 'asha' decide a trial's steps)" % d.pos)
        if c["scheduler"] == "asha":
            if self.max_steps < 2:
                raise UserError("%s: &sweep max_steps = %d: asha needs at least 2 steps"
                                % (self.at("max_steps"), self.max_steps))
            self.min_steps = c["min_steps"] or max(1, self.max_steps // (c["eta"] ** 2))
            if self.min_steps >= self.max_steps:
                raise UserError("%s: &sweep min_steps = %d must be below max_steps = %d"
                                % (self.at("min_steps"), self.min_steps, self.max_steps))
            self.rungs, r = [], self.min_steps
            while r < self.max_steps:
                self.rungs.append(r)
                r *= c["eta"]
            self.rungs.append(self.max_steps)
        else:
            self.min_steps, self.rungs = self.max_steps, [self.max_steps]
        if c["strategy"] == "grid":
            self.grid_values = [d.grid(c["grid_points"]) for d in self.dims]
            size = 1
            for v in self.grid_values:
                size *= len(v)
            if size > 1000000:
                raise UserError("%s: the grid has %d points (more than 1,000,000): lower grid_points or "
                                "use strategy = 'random' or 'bayes'" % (self.at("grid_points"), size))
            self.grid_size = size
            self.max_trials = min(c["max_trials"], size) if c["max_trials"] else size
        else:
            self.grid_size = None
            self.max_trials = c["max_trials"] or 20
        self._check_launcher()

    def _check_launcher(self):
        c = self.cfg
        launcher = c["launcher"]
        if launcher == "auto":
            launcher = auto_launcher()
        self.launcher = launcher
        if c["command"]:
            try:
                shlex.split(c["command"])
            except ValueError as e:
                raise UserError("%s: &sweep command: %s" % (self.at("command"), e))
        elif launcher == "none":
            raise UserError("%s: &sweep launcher = 'none' needs command = '...' (the trial command)"
                            % self.at("launcher"))
        for key in ("launcher_args", "trainer"):
            try:
                shlex.split(c[key])
            except ValueError as e:
                raise UserError("%s: &sweep %s: %s" % (self.at(key), key, e))
        if launcher == "srun":
            ntasks = _int_env("SLURM_NTASKS") or _int_env("SLURM_NPROCS")
            need = c["concurrent"] * c["ranks_per_trial"]
            if ntasks and need > ntasks:
                raise UserError("%s: concurrent = %d trials x ranks_per_trial = %d ranks need %d tasks, "
                                "but this Slurm allocation has %d (SLURM_NTASKS)"
                                % (self.at("concurrent"), c["concurrent"], c["ranks_per_trial"], need, ntasks))
        self.ranks_per_node = c["ranks_per_node"] or _slurm_tasks_per_node() or (
            c["ranks_per_trial"] * c["concurrent"])
        self.node_share = (c["nodes_per_trial"] if launcher == "srun" and c["nodes_per_trial"]
                           else c["ranks_per_trial"] / self.ranks_per_node)

    def identity(self):
        """What a continued study must keep: a changed space, strategy, seed, objective or
        schedule would make the recorded trials belong to another study. Budgets may change."""
        c = self.cfg
        return {"strategy": c["strategy"], "seed": c["seed"], "objective": c["objective"],
                "space": [[d.name, d.describe()] for d in self.dims], "scheduler": c["scheduler"],
                "rungs": self.rungs, "eta": c["eta"], "n_startup": c["n_startup"],
                "grid_points": c["grid_points"] if c["strategy"] == "grid" else None,
                "base": os.path.abspath(c["base"])}

    def base_digest(self):
        return hashlib.sha256(self.base.text.encode("utf-8", "surrogateescape")).hexdigest()


def auto_launcher():
    """srun inside a Slurm allocation (where srun is found), else mpirun."""
    return "srun" if os.environ.get("SLURM_JOB_ID") and shutil.which("srun") else "mpirun"


def _int_env(name):
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return 0


def _slurm_tasks_per_node():
    """SLURM_NTASKS_PER_NODE, or the first count of SLURM_TASKS_PER_NODE ('4(x2),3')."""
    n = _int_env("SLURM_NTASKS_PER_NODE")
    if n:
        return n
    s = os.environ.get("SLURM_TASKS_PER_NODE", "")
    try:
        return int(s.split(",")[0].split("(")[0]) if s else 0
    except ValueError:
        return 0


# ---------------------------------------------------------------------------------------------
# Bayesian optimisation: a Gaussian process (Matern 5/2, one length scale per input, fitted by
# maximising the marginal likelihood) and expected improvement maximised over random and local
# candidates, then refined by hill climbing. Inputs live in [0, 1]^d (Dim.encode; a categorical
# dimension is one-hot), outputs are standardised. numpy only. `np` is imported in main() so that
# tools which only read namelists (the test trainer) start fast.
# ---------------------------------------------------------------------------------------------

np = None


def _numpy():
    global np
    if np is None:
        import numpy
        np = numpy
    return np


def _matern52(A, B, ls):
    d2 = (((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1)
    r = math.sqrt(5.0) * np.sqrt(np.maximum(d2, 0.0))
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def _nelder_mead(f, x0, step, iters):
    """Minimise f from x0 (a simplex of size `step`); returns (x, f(x))."""
    n = len(x0)
    pts = [np.array(x0, dtype=float)]
    for i in range(n):
        p = pts[0].copy()
        p[i] += step
        pts.append(p)
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = np.mean(pts[:-1], axis=0)
        refl = centroid + (centroid - pts[-1])
        fr = f(refl)
        if fr < vals[0]:
            exp_ = centroid + 2.0 * (centroid - pts[-1])
            fe = f(exp_)
            pts[-1], vals[-1] = (exp_, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = centroid + 0.5 * (pts[-1] - centroid)
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    i = int(np.argmin(vals))
    return pts[i], vals[i]


class GP:
    """Gaussian-process regression on X [n, d] in [0, 1]^d, y [n]."""
    LOG_LS = (math.log(0.01), math.log(5.0))     # length scales, in units of the unit cube
    LOG_SF2 = (math.log(0.05), math.log(20.0))   # signal variance of the standardised output
    LOG_SN2 = (math.log(1e-6), math.log(1.0))    # noise variance

    def __init__(self, X, y, rng):
        self.X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float)
        self.mu, self.sd = float(y.mean()), float(y.std()) or 1.0
        self.y = (y - self.mu) / self.sd
        d = self.X.shape[1]
        lo = np.array([self.LOG_LS[0]] * d + [self.LOG_SF2[0], self.LOG_SN2[0]])
        hi = np.array([self.LOG_LS[1]] * d + [self.LOG_SF2[1], self.LOG_SN2[1]])
        self.lo, self.hi = lo, hi
        starts = [np.array([math.log(0.3)] * d + [0.0, math.log(1e-3)])]
        starts += [lo + rng.random(len(lo)) * (hi - lo) for _ in range(24)]
        scored = sorted(((self._nll(t), i) for i, t in enumerate(starts)))
        best = None
        for _, i in scored[:2]:
            t, v = _nelder_mead(self._nll, starts[i], 0.5, 60 + 20 * d)
            if best is None or v < best[1]:
                best = (t, v)
        self._set(np.clip(best[0], lo, hi))

    def _kernel_parts(self, theta):
        d = self.X.shape[1]
        return np.exp(theta[:d]), math.exp(theta[d]), math.exp(theta[d + 1])

    def _nll(self, theta):
        theta = np.clip(theta, self.lo, self.hi)
        ls, sf2, sn2 = self._kernel_parts(theta)
        n = len(self.y)
        K = sf2 * _matern52(self.X, self.X, ls) + (sn2 + 1e-8) * np.eye(n)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return 1e25
        a = np.linalg.solve(L, self.y)
        # a weak log-normal prior on the length scales keeps few points from fitting noise
        prior = 0.5 * float((((theta[:len(ls)] - math.log(0.3)) / 2.0) ** 2).sum())
        return 0.5 * float(a @ a) + float(np.log(np.diag(L)).sum()) + prior

    def _set(self, theta):
        self.theta = theta
        self.ls, self.sf2, self.sn2 = self._kernel_parts(theta)
        n = len(self.y)
        K = self.sf2 * _matern52(self.X, self.X, self.ls) + (self.sn2 + 1e-8) * np.eye(n)
        self.L = np.linalg.cholesky(K)
        self.alpha = np.linalg.solve(self.L.T, np.linalg.solve(self.L, self.y))

    def condition_on(self, Xp, yp_std):
        """Add points with standardised outputs (pending trials: the kriging believer), same
        hyperparameters."""
        self.X = np.vstack([self.X, Xp])
        self.y = np.concatenate([self.y, yp_std])
        self._set(self.theta)

    def predict_std(self, Xs):
        """Posterior mean and standard deviation, standardised units."""
        Ks = self.sf2 * _matern52(np.asarray(Xs, dtype=float), self.X, self.ls)
        mean = Ks @ self.alpha
        v = np.linalg.solve(self.L, Ks.T)
        var = np.maximum(self.sf2 - (v * v).sum(0), 1e-12)
        return mean, np.sqrt(var)


_erf = None


def expected_improvement(mean, sd, best):
    """EI of a minimisation below `best` (all standardised)."""
    global _erf
    if _erf is None:
        _erf = np.vectorize(math.erf, otypes=[float])
    imp = best - mean
    z = imp / sd
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return imp * cdf + sd * pdf


def encode_point(dims, params):
    out = []
    for d in dims:
        out.extend(d.encode(params[d.name]))
    return out


def decode_point(dims, u):
    params, i = {}, 0
    for d in dims:
        params[d.name] = d.decode(u[i:i + d.width])
        i += d.width
    return params


def _project(dims, U):
    """Each row of U moved to the encoding of the value it decodes to (integers and choices
    snap), so the model scores exactly the points that would run."""
    return np.array([encode_point(dims, decode_point(dims, list(u))) for u in U])


def propose_bayes(dims, X, y, pending, rng):
    """The next point: argmax of EI under a GP fitted to (X, y), pending points believed at the
    GP mean. Returns a params dict."""
    gp = GP(X, y, rng)
    mean_obs, _ = gp.predict_std(gp.X)
    best = float(mean_obs.min())  # the best posterior mean at an observed point: robust to noise
    if len(pending):
        mp, _ = gp.predict_std(pending)
        gp.condition_on(np.asarray(pending, dtype=float), mp)
    width = gp.X.shape[1]
    cands = [rng.random((1500, width))]
    order = np.argsort(np.asarray(y))[:5]
    for i in order:
        for s in (0.1, 0.03, 0.01):
            cands.append(np.clip(np.asarray(X[i]) + s * rng.standard_normal((100, width)), 0, 1))
    U = _project(dims, np.vstack(cands))
    m, s = gp.predict_std(U)
    ei = expected_improvement(m, s, best)
    taken = np.vstack([gp.X]) if len(gp.X) else np.zeros((0, width))
    results = []
    for i in np.argsort(-ei)[:5]:
        u, e = U[i], ei[i]
        for step in (0.05, 0.02, 0.005, 0.001):
            for _ in range(2):
                P = _project(dims, np.clip(u + step * rng.standard_normal((32, width)), 0, 1))
                pm, ps = gp.predict_std(P)
                pe = expected_improvement(pm, ps, best)
                j = int(np.argmax(pe))
                if pe[j] > e:
                    u, e = P[j], pe[j]
        results.append((e, u))
    results.sort(key=lambda t: -t[0])
    extra = [(ei[i], U[i]) for i in np.argsort(-ei)[5:50]]
    for e, u in results + extra:
        if len(taken) == 0 or np.min(np.abs(taken - u).max(1)) > 1e-9:
            return decode_point(dims, list(u))
    return decode_point(dims, list(rng.random(width)))  # everything scored is taken: explore


# ---------------------------------------------------------------------------------------------
# The state file: one JSON document, written atomically (tmp, fsync, rename, fsync dir) after
# every change. Trials: id, name, params, status (running | paused | completed | stopped |
# failed), rung (index into the rungs), results {steps: objective}, steps, tokens, wall_s,
# node_hours, attempts, error.
# ---------------------------------------------------------------------------------------------

def atomic_write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_clean(v) for v in x]
    return x


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())


def read_state_file(path, fmt, version, tool):
    """The JSON state of a study (llmsweep's, llmscale's): its format and version checked."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError("%s: the study's state file cannot be read (%s); move it away to start "
                        "the study again" % (path, e))
    if doc.get("format") != fmt or doc.get("version") != version:
        raise UserError("%s: not an %s state file of version %d" % (path, tool, version))
    return doc


def write_state_file(path, doc):
    """doc, stamped 'updated', written atomically (NaN and Inf as null)."""
    doc["updated"] = now_iso()
    atomic_write(path, json.dumps(_json_clean(doc), indent=1, allow_nan=False) + "\n")


class State:
    def __init__(self, study):
        self.path = os.path.join(study.dir, "study.json")
        self.study = study
        if os.path.exists(self.path):
            self.doc = read_state_file(self.path, STATE_FORMAT, STATE_VERSION, "llmsweep")
            self._check_identity()
            if self.doc.get("base_sha256") not in (None, study.base_digest()):
                print("llmsweep: warning: the base namelist %s changed since the study started: trials "
                      "launched from now on use its new text" % study.cfg["base"], flush=True)
            self.resumed = True
        else:
            self.doc = {"format": STATE_FORMAT, "version": STATE_VERSION, "study_file": study.path,
                        "identity": study.identity(), "created": now_iso(), "trials": [], "log": []}
            self.resumed = False
        self.doc["settings"] = {k: v for k, v in study.cfg.items()}
        self.doc["base_sha256"] = study.base_digest()
        self.doc["rungs"] = study.rungs

    def _check_identity(self):
        old, new = self.doc.get("identity", {}), self.study.identity()
        changed = [k for k in new if old.get(k) != new[k]]
        if changed and not self.doc.get("trials"):
            self.doc["identity"] = new  # nothing recorded yet: the study starts with its new settings
        elif changed:
            k = changed[0]
            at = (self.study.dims[0].pos if k == "space" else
                  self.study.at(k if k in SWEEP_KEYS else "scheduler" if k == "rungs" else "base"))
            raise UserError("%s: this study directory holds a study with another %s (%s, now %s): the "
                            "%d recorded trials would not belong to this one. Use another &sweep name or "
                            "out_dir, or move %s away" % (at, k, json.dumps(old.get(k)), json.dumps(new[k]),
                                                          len(self.doc["trials"]), self.path))

    @property
    def trials(self):
        return self.doc["trials"]

    def note(self, text):
        """A line for the user, kept in the state file's log too."""
        print("llmsweep: %s" % text, flush=True)
        self.doc["log"].append("%s %s" % (now_iso(), text))
        self.doc["log"] = self.doc["log"][-500:]

    def save(self):
        write_state_file(self.path, self.doc)


# ---------------------------------------------------------------------------------------------
# Trials: their namelists, commands, metrics.
# ---------------------------------------------------------------------------------------------

def read_metrics(path):
    """The records of a metrics.jsonl (a torn last line, from a killed run, is skipped)."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict):
                    records.append(r)
    except OSError:
        pass
    return records


def metric_at(records, key, max_step):
    """The last value of `key` at a step <= max_step (file order: a resumed run appends), and its
    step. None when absent; NaN when the record holds null or a non-number."""
    val, step = None, None
    for r in records:
        if key not in r:
            continue
        s = r.get("step")
        if isinstance(s, (int, float)) and s > max_step:
            continue
        v = r[key]
        val = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")
        step = s
    return val, step


def _is_finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def trial_name(i):
    return "t%04d" % i


def trial_value(study, params, group, key, default):
    v = params.get("%s.%s" % (group, key), namelist_value(study.base, group, key, default))
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def tokens_per_step(study, params):
    """llmtrain's tokens per optimizer step for the trial: global_batch (micro_batch x dp when 0)
    x seq_len, with llmtrain's defaults for keys the namelist leaves out."""
    gb = trial_value(study, params, "train", "global_batch", 0)
    if not gb:
        gb = trial_value(study, params, "train", "micro_batch", 4) * trial_value(study, params, "parallel", "dp", 1)
    return gb * trial_value(study, params, "model", "seq_len", 1024)


def segment_end(study, params, rung):
    """The step a trial's segment runs to: its rung's, or, where the study leaves max_steps to the
    base and the space sets train.max_steps, the trial's own."""
    if not study.steps_set and isinstance(params.get("train.max_steps"), int):
        return params["train.max_steps"]
    return study.rungs[rung]


# what a run that only measures sets (llmsweep's preflight, llmscale's runs): no checkpoints, no
# weights file, validation only at the end (llmtrain validates at the end even of 0 steps)
NO_SAVES = {("checkpoint", "resume"): "none", ("checkpoint", "every"): 0,
            ("checkpoint", "save_weights"): False, ("data", "val_every"): 0}


def clear_checkpoint_dir(base, o):
    """A run directory of its own holds the run's checkpoints: the base's &checkpoint dir, if it
    names one, is set to '' in the overrides o (llmsweep's trials, llmscale's runs)."""
    if namelist_value(base, "checkpoint", "dir") not in (None, ""):
        o[("checkpoint", "dir")] = ""


def trial_overrides(study, t, target, trials_dir):
    """The keys the study sets in trial t's namelist."""
    o = {("run", "out_dir"): trials_dir, ("run", "name"): t["name"], ("checkpoint", "resume"): "auto"}
    clear_checkpoint_dir(study.base, o)
    if study.steps_set:
        o[("train", "max_steps")] = target
    if study.cfg["scheduler"] == "asha":
        # a checkpoint at every rung boundary (the end of each segment is one: llmtrain writes a
        # final checkpoint whenever every > 0), and in between for a killed trial to resume from
        every = namelist_value(study.base, "checkpoint", "every", 0)
        if not isinstance(every, int) or every <= 0 or study.min_steps % every:
            o[("checkpoint", "every")] = study.min_steps
    for name, value in t["params"].items():
        g, k = name.split(".", 1)
        o[(g, k)] = value
    return o


def format_params(params):
    return " ".join("%s=%s" % (k, _short(v)) for k, v in params.items())


def _short(v):
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


def trial_command(study, name, nml, trial_dir):
    c = study.cfg
    ranks = str(c["ranks_per_trial"])
    if c["command"]:
        argv = []
        for a in shlex.split(c["command"]):
            for ph, val in (("{nml}", nml), ("{ranks}", ranks), ("{trial}", name), ("{dir}", trial_dir)):
                a = a.replace(ph, val)
            argv.append(a)
        if "{nml}" not in c["command"]:
            argv.append(nml)
        return argv
    extra, trainer = shlex.split(c["launcher_args"]), shlex.split(c["trainer"])
    # --exact gives each trial's step only the CPUs it asks for: `concurrent` steps share the nodes
    return launcher_argv(study.launcher, c["ranks_per_trial"], "%s-%s" % (c["name"], name), "--exact",
                         nodes=c["nodes_per_trial"]) + extra + trainer + [nml]


def launcher_argv(launcher, ranks, job_name, share, nodes=0, tasks_per_node=0, mpirun="mpirun"):
    """The launcher's words for `ranks` MPI ranks (llmscale uses it too): an srun job step inside
    the allocation (share: '--exact', '--exclusive' or '--overlap', how the step shares the
    allocation's CPUs with other steps; llmtrain binds its ranks itself), or `mpirun` (a command
    line, e.g. $MPIRUN) with -np."""
    if launcher == "srun":
        argv = ["srun", share, "--ntasks=%d" % ranks, "--cpu-bind=none", "--kill-on-bad-exit=1",
                "--job-name=" + job_name]
        if nodes:
            argv.append("--nodes=%d" % nodes)
        if tasks_per_node:
            argv.append("--ntasks-per-node=%d" % tasks_per_node)
        if os.environ.get("SLURM_CPUS_PER_TASK"):
            argv.append("--cpus-per-task=" + os.environ["SLURM_CPUS_PER_TASK"])
        return argv
    return shlex.split(mpirun) + ["-np", str(ranks)]


_libc = None


def command_text(argv):
    """argv as one shell-quoted line (the logs' record of a command)."""
    return " ".join(shlex.quote(a) for a in argv)


def start_child(argv, log, cpus=None, env=None):
    """argv started in a session of its own, stdin closed, stdout and stderr into the open file
    log, ended with its parent (_child_setup) and kept on `cpus` when given (llmsweep's trials,
    llmscale's runs). OSError when it cannot start."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, preexec_fn=_child_setup(cpus))


def _child_setup(cpus):
    """In the trial's process before exec: end it (SIGTERM: llmtrain checkpoints and exits 75) if
    llmsweep dies, and keep it on its share of the CPUs."""
    parent = os.getpid()  # llmsweep, as seen from the child before exec

    def setup():
        global _libc
        try:
            if _libc is None:
                _libc = ctypes.CDLL(None, use_errno=True)
            _libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # llmsweep died before prctl
            os.kill(os.getpid(), signal.SIGTERM)
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                pass
    return setup


def _proc_start_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid, ticks):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return ticks is None or _proc_start_ticks(pid) == ticks


_REASON_WORDS = ("error", "traceback", "not found", "no such", "cannot", "can't", "refused", "failed",
                 "invalid", "unknown", "detected", "denied", "unable", "could not")


def _log_reason(log_path, marker="== llmsweep"):
    """One line that says why a trial failed, from its last attempt's output (after the last line
    starting with `marker`): llmtrain's own message (it names the namelist's file:line:col), else
    the first line that reads like an error with the rest of its paragraph (a launcher wraps its
    messages), else the first line."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines()[-400:] if ln.strip()]
    except OSError:
        return ""
    attempt = max((i for i, ln in enumerate(lines) if ln.startswith(marker)), default=-1)
    lines = lines[attempt + 1:]
    # llmtrain's error first: its warnings (e.g. OpenBLAS's CPU) come before it in the log
    for ln in lines:
        if ln.startswith("llmtrain: error"):
            return ln[:800]
    for ln in lines:
        if ln.startswith("llmtrain:") and not ln.startswith("llmtrain: warning"):
            return ln[:800]
    for i, ln in enumerate(lines):
        if any(w in ln.lower() for w in _REASON_WORDS):
            para = []
            for nxt in lines[i:i + 4]:
                if not any(ch.isalnum() for ch in nxt):
                    break  # a line of dashes ends the paragraph
                para.append(nxt)
            return " ".join(para)[:800]
    words = [ln for ln in lines if any(ch.isalnum() for ch in ln)]
    return words[0][:800] if words else ""


# ---------------------------------------------------------------------------------------------
# The study loop.
# ---------------------------------------------------------------------------------------------

class _Proc:
    def __init__(self, trial, popen, log, slot, from_steps, from_tokens, target):
        self.trial, self.popen, self.log, self.slot = trial, popen, log, slot
        self.t0 = time.time()
        self.from_steps, self.from_tokens, self.target = from_steps, from_tokens, target


class Runner:
    HEARTBEAT_S, STALE_S = 10.0, 60.0

    def __init__(self, study, state):
        self.study, self.state, self.cfg = study, state, study.cfg
        self.running = {}
        self.stop_signal = None
        self.launch_stopped = None   # why no trial is launched any more (a budget, the target, ...)
        self.trials_full = False     # max_trials reached or the grid used up (said once)
        self.failures_in_row = 0
        self.trials_dir = os.path.join(study.dir, "trials")
        self.lock_path = os.path.join(study.dir, ".llmsweep.lock")
        self.host = socket.gethostname()
        self.last_beat = 0.0
        self.slots = self._cpu_slots()

    # ---- the study directory's lock ----------------------------------------------------------

    def lock(self):
        me = {"host": self.host, "pid": os.getpid(), "start_ticks": _proc_start_ticks(os.getpid()),
              "slurm_job": os.environ.get("SLURM_JOB_ID", ""), "started": now_iso()}
        if os.path.exists(self.lock_path):
            try:
                with open(self.lock_path) as f:
                    old = json.load(f)
                age = time.time() - os.path.getmtime(self.lock_path)
            except (OSError, ValueError):
                old, age = {}, 1e9
            same_job = bool(me["slurm_job"]) and old.get("slurm_job") == me["slurm_job"]
            if old.get("host") == self.host:
                busy = _alive(old.get("pid"), old.get("start_ticks")) and old.get("pid") != os.getpid()
            else:
                busy = age < self.STALE_S and not same_job
            if busy:
                raise UserError("%s: the study directory is in use by llmsweep pid %s on %s (since %s%s); "
                                "wait for it or stop it" % (self.study.dir, old.get("pid"), old.get("host"),
                                                            old.get("started"), ", Slurm job %s" % old["slurm_job"]
                                                            if old.get("slurm_job") else ""))
            print("llmsweep: taking over the lock of llmsweep pid %s on %s (%s)"
                  % (old.get("pid"), old.get("host"), "same Slurm job" if same_job else
                     "no longer running" if old.get("host") == self.host else "no heartbeat for %.0f s" % age),
                  flush=True)
        atomic_write(self.lock_path, json.dumps(me) + "\n")

    def heartbeat(self):
        if time.time() - self.last_beat >= self.HEARTBEAT_S:
            self.last_beat = time.time()
            try:
                os.utime(self.lock_path)
            except OSError:
                pass

    def unlock(self):
        try:
            with open(self.lock_path) as f:
                if json.load(f).get("pid") == os.getpid():
                    os.unlink(self.lock_path)
        except (OSError, ValueError):
            pass

    # ---- where trials run --------------------------------------------------------------------

    def _cpu_slots(self):
        """Locally, concurrent trials get disjoint shares of this process's CPUs (each rank then
        binds within its trial's share); under srun, Slurm places the steps."""
        n = self.cfg["concurrent"]
        if n == 1 or self.study.launcher == "srun" or not hasattr(os, "sched_getaffinity"):
            return [None] * n
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < n:
            return [None] * n
        per = len(cpus) // n
        return [set(cpus[i * per:(i + 1) * per]) for i in range(n)]

    def free_slot(self):
        used = {p.slot for p in self.running.values()}
        return next(i for i in range(self.cfg["concurrent"]) if i not in used)

    # ---- trials ------------------------------------------------------------------------------

    def trial_dir(self, t):
        return os.path.join(self.trials_dir, t["name"])

    def write_trial_nml(self, t, target, overrides=None):
        d = self.trial_dir(t)
        os.makedirs(d, exist_ok=True)
        o = overrides or trial_overrides(self.study, t, target, self.trials_dir)
        header = ("! %s/trial.nml - written by llmsweep for trial %s of study %s: the base %s with "
                  "these keys set:\n!   %s\n" % (d, t["name"], self.cfg["name"], self.cfg["base"], overrides_text(o)))
        path = os.path.join(d, "trial.nml")
        atomic_write(path, namelist_with(self.study.base, o, header))
        return path

    def launch(self, t, why):
        target = segment_end(self.study, t["params"], t["rung"])
        nml = self.write_trial_nml(t, target)
        d = self.trial_dir(t)
        argv = trial_command(self.study, t["name"], nml, d)
        log_path = os.path.join(d, "trial.log")
        log = open(log_path, "a", encoding="utf-8")
        log.write("== llmsweep %s: %s, attempt %d, to step %d: %s\n"
                  % (now_iso(), why, t["attempts"] + 1, target, command_text(argv)))
        log.flush()
        slot = self.free_slot()
        env = dict(os.environ, LLMSWEEP_STUDY=self.study.dir, LLMSWEEP_TRIAL=t["name"])
        try:
            p = start_child(argv, log, cpus=self.slots[slot], env=env)
        except OSError as e:
            log.close()
            raise UserError("trial %s: the trainer command cannot run: %s: %s"
                            % (t["name"], argv[0], e.strerror or e))
        t.update(status="running", attempts=t["attempts"] + 1, launches=t.get("launches", 0) + 1, pid=p.pid,
                 host=self.host,
                 start_ticks=_proc_start_ticks(p.pid), started=now_iso())
        self.running[t["id"]] = _Proc(t, p, log, slot, t["steps"], t["tokens"], target)
        self.state.save()
        return p

    def new_trial(self, params):
        i = len(self.state.trials)
        t = {"id": i, "name": trial_name(i), "params": params, "status": "running", "rung": 0,
             "results": {}, "objective": None, "steps": 0, "tokens": 0, "wall_s": 0.0,
             "node_hours": 0.0, "attempts": 0, "error": ""}
        self.state.trials.append(t)
        return t

    def reap(self):
        changed = False
        for tid, p in list(self.running.items()):
            rc = p.popen.poll()
            if rc is None:
                continue
            wall = time.time() - p.t0
            t = p.trial
            t["wall_s"] += wall
            t["node_hours"] += wall * self.study.node_share / 3600.0
            p.log.close()
            del self.running[tid]
            self.finish_segment(t, rc, p)
            changed = True
        if changed:
            self.state.save()
            write_tables(self.study, self.state)
        return changed

    def finish_segment(self, t, rc, p):
        target = p.target
        metrics = read_metrics(os.path.join(self.trial_dir(t), "metrics.jsonl"))
        steps = [r["step"] for r in metrics if isinstance(r.get("step"), int)]
        if steps:
            t["steps"] = steps[-1]
        toks = [r["tokens"] for r in metrics if isinstance(r.get("tokens"), (int, float))]
        if toks:
            t["tokens"] = int(toks[-1])
        log = os.path.join(self.trial_dir(t), "trial.log")
        t.update(pid=None, ended=now_iso(), exit_code=rc)
        if self.stop_signal is not None and rc != 0:
            return  # we stopped it: it stays 'running' and the next llmsweep resumes it
        if rc == EXIT_REQUEUE:
            if t["attempts"] < self.cfg["max_attempts"]:
                self.state.note("trial %s stopped with exit 75 (a signal; state saved): relaunching it "
                                "(attempt %d of %d)" % (t["name"], t["attempts"] + 1, self.cfg["max_attempts"]))
                t["relaunch"] = True
                return
            return self.fail(t, "exit 75 in %d attempts" % t["attempts"], log)
        if rc != 0:
            why = "killed by signal %d" % -rc if rc < 0 else "exit %d" % rc
            return self.fail(t, why, log)
        obj = self.cfg["objective"]
        val, at = metric_at(metrics, obj, target)
        if val is None:
            return self.fail(t, "no '%s' record at a step <= %d in its metrics.jsonl" % (obj, target), log)
        if not math.isfinite(val):
            return self.fail(t, "'%s' is not a number (%s) at step %s" % (obj, val, at), log)
        t["results"][str(self.study.rungs[t["rung"]])] = val  # keyed by rung, whatever its steps
        t["objective"] = val
        t["attempts"] = 0
        self.failures_in_row = 0
        last = t["rung"] == len(self.study.rungs) - 1
        t["status"] = "completed" if last else "paused"
        self.state.note("trial %s %s: %s %.6g at step %s (%.1f s)"
                        % (t["name"], "done" if last else "reached rung %d" % t["rung"], obj, val,
                           at if at is not None else target, time.time() - p.t0))
        tgt = self.cfg["target"]
        if last and tgt is not None and val <= tgt and not self.launch_stopped:
            self.stop_launching("trial %s reached the target: %s %.6g <= %g" % (t["name"], obj, val, tgt))

    def fail(self, t, why, log):
        reason = _log_reason(log)
        t.update(status="failed", error=why + (": " + reason if reason else ""))
        self.failures_in_row += 1
        self.state.note("trial %s failed: %s (log: %s); the study goes on" % (t["name"], t["error"], log))
        mf = self.cfg["max_failures"]
        if mf and self.failures_in_row >= mf and not self.launch_stopped:
            self.stop_launching("%d trials failed in a row (max_failures = %d)" % (self.failures_in_row, mf))
            self.too_many_failures = True

    def stop_launching(self, why):
        self.launch_stopped = why
        self.state.note("no more trials are launched: %s" % why)
        self.state.doc["stopped_launching"] = why

    # ---- what runs next ----------------------------------------------------------------------

    def pending_points(self):
        return [encode_point(self.study.dims, p.trial["params"]) for p in self.running.values()]

    def observations(self):
        """(X, y) for the model: for ASHA the highest rung with enough results; a failed trial
        counts as the worst result seen, so the model learns to avoid its region."""
        trials, rungs = self.state.trials, self.study.rungs
        need = len(self.study.dims) + 2
        chosen = rungs[0]
        for r in reversed(rungs):
            if sum(1 for t in trials if _is_finite(t["results"].get(str(r)))) >= need:
                chosen = r
                break
        X, y, failed = [], [], []
        for t in trials:
            v = t["results"].get(str(chosen))
            if _is_finite(v):
                X.append(encode_point(self.study.dims, t["params"]))
                y.append(v)
            elif t["status"] == "failed" and t["rung"] == 0:
                failed.append(encode_point(self.study.dims, t["params"]))
        if y and failed:
            X += failed
            y += [max(y)] * len(failed)
        return X, y

    def propose(self, index):
        study, c = self.study, self.cfg
        if c["strategy"] == "grid":
            point, rest = {}, index
            for d, vals in reversed(list(zip(study.dims, study.grid_values))):
                point[d.name] = vals[rest % len(vals)]
                rest //= len(vals)
            return {d.name: point[d.name] for d in study.dims}
        rng = np.random.default_rng([c["seed"], index])
        if c["strategy"] == "random" or index < c["n_startup"]:
            return {d.name: d.sample(rng) for d in study.dims}
        X, y = self.observations()
        if len(y) < 2:
            return {d.name: d.sample(rng) for d in study.dims}
        return propose_bayes(study.dims, X, y, self.pending_points(), rng)

    def promotion(self):
        """ASHA: the best trial of the highest rung that may promote one. Rung k promotes its
        best floor(n_k / eta) results (n_k: trials that reported at rung k) and no more, so the
        number stopped at each rung is fixed by the number of trials."""
        if self.cfg["scheduler"] != "asha":
            return None
        rungs, eta = self.study.rungs, self.cfg["eta"]
        for k in reversed(range(len(rungs) - 1)):
            at_k = [t for t in self.state.trials if _is_finite(t["results"].get(str(rungs[k])))]
            quota = len(at_k) // eta
            promoted = sum(1 for t in at_k if t["rung"] > k)
            if promoted >= quota:
                continue
            top = sorted(at_k, key=lambda t: (t["results"][str(rungs[k])], t["id"]))[:quota]
            for t in top:
                if t["status"] == "paused" and t["rung"] == k:
                    return t
        return None

    def budget_refusal(self, label, params, from_steps, to_steps):
        c, steps = self.cfg, to_steps - from_steps
        if c["max_tokens"]:
            tps = tokens_per_step(self.study, params)
            used = 0
            for t in self.state.trials:
                p = self.running.get(t["id"])
                used += (p.from_tokens + (p.target - p.from_steps) * tokens_per_step(self.study, t["params"])
                         if p else t["tokens"])
            if used + steps * tps > c["max_tokens"]:
                return ("max_tokens = %.6g: %d tokens trained or planned, and the next trial (%s, %d steps "
                        "of %d tokens) would exceed it" % (c["max_tokens"], used, label, steps, tps))
        if c["max_node_hours"]:
            done_h = sum(t["node_hours"] for t in self.state.trials)
            # the slowest node-hours per step seen so far: the estimate errs on the safe side
            rate = max((t["node_hours"] / t["steps"] for t in self.state.trials if t["steps"]), default=0.0)
            now = time.time()
            running_h = 0.0
            for p in self.running.values():
                elapsed = (now - p.t0) * self.study.node_share / 3600.0
                running_h += max(elapsed, rate * (p.target - p.from_steps))
            est = rate * steps
            if done_h + running_h + est > c["max_node_hours"]:
                return ("max_node_hours = %.6g: %.4g node-hours used or running, and the next trial (%s, %d "
                        "steps, about %.3g node-hours) would exceed it" % (c["max_node_hours"],
                                                                           done_h + running_h, label, steps, est))
        return None

    def next_job(self):
        """(trial, why) to launch now, or None."""
        for t in self.state.trials:  # interrupted segments first: they were admitted already
            if t["status"] == "running" and t["id"] not in self.running:
                t.pop("relaunch", None)
                return t, "resumed" if t["steps"] else "relaunched"
        if self.launch_stopped:
            return None
        t = self.promotion()
        if t is not None:
            k = t["rung"] + 1
            why = self.budget_refusal("%s to rung %d" % (t["name"], k), t["params"], t["steps"],
                                      self.study.rungs[k])
            if why:
                self.stop_launching(why)
                return None
            t["rung"] = k
            t["status"] = "running"
            self.state.note("trial %s promoted to rung %d: continues from step %d to %d"
                            % (t["name"], k, t["steps"], self.study.rungs[k]))
            return t, "promoted to rung %d" % k
        n = len(self.state.trials)
        if n >= self.study.max_trials:
            if not self.trials_full:
                self.trials_full = True
                if self.study.grid_size is not None and n >= self.study.grid_size:
                    self.state.note("every point of the grid (%d) has a trial" % self.study.grid_size)
                else:
                    self.state.note("max_trials = %d reached: no new trials" % self.study.max_trials)
            return None
        params = self.propose(n)
        why = self.budget_refusal(trial_name(n), params, 0, segment_end(self.study, params, 0))
        if why:
            self.stop_launching(why)
            return None
        t = self.new_trial(params)
        self.state.note("trial %s: %s" % (t["name"], format_params(params)))
        return t, "new trial"

    # ---- start, stop, the loop ---------------------------------------------------------------

    def take_over_leftovers(self):
        """Trials 'running' in the state file belong to an llmsweep that ended: any of their
        processes still alive here is stopped (SIGTERM: llmtrain saves its state), then they are
        relaunched with resume = 'auto'."""
        for t in self.state.trials:
            if t["status"] == "stopped":
                t["status"] = "paused"  # stopped by ASHA at the end of a study: may be promoted again
            if t["status"] == "running":
                t["attempts"] = 0  # interrupted with the study: its own tries start again
            if t["status"] != "running" or t.get("host") != self.host or not t.get("pid"):
                continue
            pid, ticks = t["pid"], t.get("start_ticks")
            if not _alive(pid, ticks):
                continue
            self.state.note("trial %s still runs from an earlier llmsweep (pid %d): stopping it to "
                            "resume it" % (t["name"], pid))
            self._signal_group(pid, signal.SIGTERM)
            deadline = time.time() + self.cfg["stop_timeout_s"]
            while _alive(pid, ticks) and time.time() < deadline:
                time.sleep(0.1)
            if _alive(pid, ticks):
                self._signal_group(pid, signal.SIGKILL)
                time.sleep(0.5)

    @staticmethod
    def _signal_group(pid, sig):
        try:
            os.killpg(pid, sig)  # trials lead their own session: pgid = pid
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def preflight(self):
        """The first trial's namelist run for 0 steps: a bad namelist, a missing program or a
        launcher that cannot start stops the study before it spends anything."""
        params = self.propose(0)
        t = {"name": "preflight", "params": params}
        d = os.path.join(self.study.dir, "preflight")
        shutil.rmtree(d, ignore_errors=True)
        o = trial_overrides(self.study, dict(t, name="preflight"), 0, self.study.dir)
        # val_every = 0: llmtrain validates at the end even of 0 steps, which shows that the
        # objective 'val_loss' will exist
        o[("train", "max_steps")] = 0
        o.update(NO_SAVES)
        os.makedirs(d, exist_ok=True)
        nml = os.path.join(d, "trial.nml")
        atomic_write(nml, namelist_with(self.study.base, o, "! preflight of study %s (0 steps)\n"
                                        % self.cfg["name"]))
        argv = trial_command(self.study, "preflight", nml, d)
        log_path = os.path.join(d, "trial.log")
        t0 = time.time()
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("== llmsweep %s: preflight: %s\n" % (now_iso(), command_text(argv)))
            log.flush()
            try:
                rc = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_child_setup(None))
            except OSError as e:
                raise UserError("preflight of trial %s: the trainer command cannot run: %s: %s"
                                % (trial_name(0), argv[0], e.strerror or e))
        if rc != 0:
            raise UserError("preflight of trial %s (its namelist for 0 steps): the trainer command failed "
                            "with exit %d: %s; command: %s; log: %s"
                            % (trial_name(0), rc, _log_reason(log_path) or "no output",
                               command_text(argv), log_path))
        metrics = os.path.join(d, "metrics.jsonl")
        if (self.cfg["objective"] == "val_loss" and os.path.exists(metrics)
                and metric_at(read_metrics(metrics), "val_loss", 0)[0] is None):
            raise UserError("%s: objective = 'val_loss', but the base %s gives no validation loss (its "
                            "preflight wrote no val_loss record): set &data val_files there, or choose "
                            "another objective (e.g. 'loss')" % (self.study.at("objective"), self.cfg["base"]))
        print("llmsweep: preflight passed (%.1f s): %s" % (time.time() - t0, " ".join(argv)), flush=True)

    def on_signal(self, signum, frame):
        if self.stop_signal is None:
            self.stop_signal = signum
            print("llmsweep: %s: stopping the running trials (they save their state), then exiting with "
                  "code %d; run llmsweep again to continue" % (signal.Signals(signum).name, EXIT_REQUEUE),
                  flush=True)

    def stop_running(self):
        for p in self.running.values():
            self._signal_group(p.popen.pid, signal.SIGTERM)
        deadline = time.time() + self.cfg["stop_timeout_s"]
        while self.running and time.time() < deadline:
            self.reap()
            time.sleep(0.1)
        for p in self.running.values():
            self._signal_group(p.popen.pid, signal.SIGKILL)
        while self.running:
            self.reap()
            time.sleep(0.05)

    def run(self):
        study, state = self.study, self.state
        os.makedirs(self.trials_dir, exist_ok=True)
        self.lock()
        self.too_many_failures = False
        try:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                signal.signal(sig, self.on_signal)
            self.take_over_leftovers()
            if state.resumed and state.trials:
                done = sum(1 for t in state.trials if t["status"] not in ("running",))
                state.note("continuing study %s: %d trials recorded (%d finished or paused)"
                           % (study.dir, len(state.trials), done))
            state.doc.pop("stopped_launching", None)
            state.save()
            if self.cfg["preflight"] and not any(t["steps"] or t["results"] for t in state.trials):
                self.preflight()
            while self.stop_signal is None:
                self.reap()
                self.heartbeat()
                while self.stop_signal is None and len(self.running) < self.cfg["concurrent"]:
                    job = self.next_job()
                    if job is None:
                        break
                    self.launch(*job)
                if not self.running:
                    break
                time.sleep(0.02 if self.cfg["launcher"] == "none" else 0.1)
            if self.stop_signal is not None:
                self.stop_running()
                state.save()
                write_tables(study, state)
                print("llmsweep: stopped by %s; the state is in %s (exit %d)"
                      % (signal.Signals(self.stop_signal).name, state.path, EXIT_REQUEUE), flush=True)
                return EXIT_REQUEUE
            return self.finish()
        finally:
            for p in self.running.values():
                self._signal_group(p.popen.pid, signal.SIGTERM)
            self.unlock()

    def finish(self):
        study, state = self.study, self.state
        stopped = {}
        for t in state.trials:
            if t["status"] == "paused":
                t["status"] = "stopped"
                stopped.setdefault(t["rung"], []).append(t["name"])
        for k in sorted(stopped):
            state.note("stopped by asha at rung %d (%d steps): %d trials (%s)"
                       % (k, study.rungs[k], len(stopped[k]), " ".join(stopped[k])))
        state.save()
        best = write_results(study, state, plots=True)
        counts = {}
        for t in state.trials:
            counts[t["status"]] = counts.get(t["status"], 0) + 1
        summary = ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))
        if best:
            state.note("study done: %d trials (%s); best %s: %s %.6g at step %d (%s) -> %s"
                       % (len(state.trials), summary, best["name"], self.cfg["objective"], best["objective"],
                          best["steps"], format_params(best["params"]), os.path.join(study.dir, "best.nml")))
        else:
            state.note("study done: %d trials (%s); no trial gave an objective" % (len(state.trials), summary))
        state.save()
        return EXIT_FAILURES if self.too_many_failures else EXIT_OK


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


# ---------------------------------------------------------------------------------------------

USAGE = """usage: llmsweep STUDY.nml            run the study, or continue it
       llmsweep --check STUDY.nml    check the study file; print the space and trial 0's namelist
       llmsweep --report STUDY.nml   rewrite results.md, results.csv, best.nml and the plots
       llmsweep --help | --version
The study file has &sweep (settings) and &space (the search space); see docs/llmsweep.md
and inputs/sweep-tiny.nml."""


def _version():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "core", "version.h")) as f:
            for line in f:
                if "define LLMT_VERSION " in line:
                    return line.split('"')[1]
    except (OSError, IndexError):
        pass
    return "unknown"


def check_only(study):
    c = study.cfg
    print("study %s: strategy %s, objective %s, %d dimensions, up to %d trials; directory %s"
          % (c["name"], c["strategy"], c["objective"], len(study.dims), study.max_trials, study.dir))
    for d in study.dims:
        print("  %-28s %s" % (d.name, d.describe()))
    if c["scheduler"] == "asha":
        print("asha: eta %d, rungs at %s steps" % (c["eta"], ", ".join(str(r) for r in study.rungs)))
    runner = Runner.__new__(Runner)
    runner.study, runner.cfg, runner.state = study, c, None
    runner.trials_dir = os.path.join(study.dir, "trials")
    params = Runner.propose(runner, 0)  # trial 0 is a grid point or a random draw
    t = {"name": trial_name(0), "params": params}
    o = trial_overrides(study, t, study.rungs[0], runner.trials_dir)
    print("trial %s: %s" % (t["name"], " ".join(argv for argv in trial_command(
        study, t["name"], os.path.join(runner.trials_dir, t["name"], "trial.nml"),
        os.path.join(runner.trials_dir, t["name"])))))
    sys.stdout.write(namelist_with(study.base, o))


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        if args:
            print("\n&sweep keys [default]:")
            for key, (typ, default, _, text) in SWEEP_KEYS.items():
                shown = "unset" if default is None else format_value(default)
                print("  %-16s %-8s [%s] %s" % (key, typ if "|" not in typ else "str", shown,
                                                 text + (" (%s)" % typ.replace("|", " | ") if "|" in typ else "")))
            print("&space entries: group.key = log(lo, hi) | uniform(lo, hi) | int(lo, hi) | logint(lo, hi)"
                  " | {v1, v2, ...}")
        return EXIT_OK if args else EXIT_USER
    if args[0] == "--version":
        print("llmsweep (llmtrain %s)" % _version())
        return EXIT_OK
    mode = "run"
    if args[0] in ("--check", "--report"):
        mode, args = args[0][2:], args[1:]
    if len(args) != 1 or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return EXIT_USER
    try:
        _numpy()
        study = Study(args[0])
        if mode == "check":
            check_only(study)
            return EXIT_OK
        try:
            os.makedirs(study.dir, exist_ok=True)
            probe = os.path.join(study.dir, ".llmsweep.probe")
            with open(probe, "w"):
                pass
            os.unlink(probe)
        except OSError as e:
            raise UserError("%s: the study directory %s cannot be written: %s"
                            % (study.at("out_dir"), study.dir, e.strerror or e))
        if mode == "report" and not os.path.exists(os.path.join(study.dir, "study.json")):
            raise UserError("%s: no study has run in %s yet (no study.json): nothing to report"
                            % (study.path, study.dir))
        state = State(study)
        if mode == "report":
            write_results(study, state, plots=True)
            print("llmsweep: wrote %s/results.md, results.csv, best.nml and the plots" % study.dir)
            return EXIT_OK
        return Runner(study, state).run()
    except UserError as e:
        print("llmsweep: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USER


if __name__ == "__main__":
    sys.exit(main(sys.argv))
