"""sweep_space — llmsweep's study file and search space: the &sweep settings (SWEEP_KEYS), the
&space dimensions (Dim: log, uniform, int, logint, categorical), the Study (base namelist, space,
launcher, checks), and the Bayesian sampler: a Gaussian process (Matern 5/2) with expected
improvement (GP, propose_bayes). Also the exit codes and state-file format every sweep module
shares. Uses: nml.py. Used by: sweep_state, sweep_runner, sweep_report, llmsweep.
"""

import difflib
import hashlib
import math
import os
import shlex
import shutil

from nml import (UserError, format_value, namelist_value, read_namelist_file)  # nml.py, beside this file

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
