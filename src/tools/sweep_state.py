"""sweep_state — llmsweep's state file and trial plumbing: the study.json document written
atomically (State, read/write_state_file), trial namelists and metrics (read_metrics,
trial_overrides), and the launcher and child processes (launcher_argv, start_child, _log_reason;
llmscale and merge_trial use these through llmsweep). Uses: nml.py, sweep_space. Used by:
sweep_runner, sweep_report, llmsweep.
"""

import ctypes
import json
import math
import os
import shlex
import signal
import subprocess
import time

from nml import (UserError, namelist_value)  # nml.py, beside this file
from sweep_space import (STATE_FORMAT, STATE_VERSION, SWEEP_KEYS)


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
