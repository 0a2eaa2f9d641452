#!/usr/bin/env python3
"""merge_trial.py — one trial of a merge-weight search: merge with llmmerge, evaluate the merged
weights with `llmtrain mode = 'eval'` on several validation sets, and write the mean of their
validation losses as the trial's objective, in the record llmsweep reads.

    src/tools/merge_trial.py [--ranks N] [--launcher 'CMD'] [--llmmerge P] [--llmtrain P] TRIAL.nml

As a study's trial command (docs/llmmerge.md):
    &sweep base = 'inputs/merge-search.nml', launcher = 'none'
           command = 'src/tools/merge_trial.py --ranks {ranks} {nml}' /
    &space merge_trial.t = uniform(0, 1) /
or by hand on a namelist of the same form (one merge, evaluated).

TRIAL.nml (inputs/merge-search.nml is an example) holds three kinds of groups:
  &merge        llmmerge's keys; out (RUN_DIR/merged.h5) and overwrite (.true.) are set here
  &merge_trial  this program's keys (TRIAL_KEYS below): the validation sets, and the merge weight
                a search sets, as scalars because an &space entry sets one whole key:
                  t = x           two models: &merge weights = 1 - x, x (t = 0 is the first
                                  model); method = 'slerp': &merge t = x
                  weight_I = x    element I (from 1) of &merge weights; the others as given
                                  there, 1 where &merge gives none
  the rest      llmtrain's groups (&run &model &data ...): each set's evaluation is this namelist
                with mode = 'eval', init_from = the merged file, &data val_files = the set
The merge sees TRIAL.nml with every other group blanked out (so llmmerge's file:line:col point
into TRIAL.nml too), the evaluations with &merge and &merge_trial blanked out.

RUN_DIR is &run out_dir/name, as for llmtrain (llmsweep sets them to STUDY_DIR/trials/tNNNN):
  merge.nml, merge.log     what llmmerge read, and its output
  merged.h5                the merged weights (deleted after the evaluations if keep_merged = .false.)
  eval_NAME.nml, .log      each set's evaluation
  metrics.jsonl            one record: {"step": 0, "val_loss": the mean over the sets,
                           "val_loss_max": the worst set, "val_loss_NAME": each set, "weights" or
                           "t": what was merged, ...}; llmsweep's objective 'val_loss' is the mean,
                           'val_loss_max' the worst set. Written last: a trial that fails leaves none.
A set's loss is llmtrain's printed value (`eval: val_loss X over N batches`, 6 decimals); the mean
is of those values.

Exit codes: 0 the record is written; 2 bad input (TRIAL.nml: file:line:col; or llmmerge or llmtrain
refused their input); 1 llmmerge or an evaluation failed otherwise; 75 stopped by SIGTERM or SIGINT
(nothing to save: run it again). A failure is one line, `merge_trial: error: ...`, naming the step,
its exit code, the program's own message and its log; llmsweep records it as the trial's error.

Why Python and not a shell script: the trial namelist has to be read and rewritten (three sets of
groups, values replaced, file:line:col kept), and the tools' reader of llmtrain's namelist grammar
(src/tools/nml.py, which this imports) does exactly that; a shell script would need a second
namelist parser. The rest is running two programs and a mean. Standard library only.
"""
import difflib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmsweep as sw  # noqa: E402  (atomic_write, _REASON_WORDS)
import nml as nl  # noqa: E402  (the namelist reader and writer)

EXIT_OK, EXIT_FAILED, EXIT_USER, EXIT_STOPPED = 0, 1, 2, 75
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# key: (kind, help); weight_I is any weight_<integer >= 1>
TRIAL_KEYS = {
    "val_sets": ("string", "one llmtrain &data val_files value per validation set (required)"),
    "set_names": ("string", "one name per set, [A-Za-z0-9_], for val_loss_NAME [set1, set2, ...]"),
    "t": ("real", "two models: &merge weights = 1 - t, t; slerp: &merge t"),
    "weight_I": ("real", "element I (1, 2, ...) of &merge weights"),
    "keep_merged": ("logical", "keep RUN_DIR/merged.h5 after the evaluations [.true.]"),
}
USAGE = ("usage: merge_trial.py [--ranks N] [--launcher 'CMD'] [--llmmerge PATH] [--llmtrain PATH] "
         "TRIAL.nml\n  (see the header of src/tools/merge_trial.py, and docs/llmmerge.md)")


class TrialError(Exception):
    """Printed once as 'merge_trial: error: <message>'; the exit code is code."""

    def __init__(self, msg, code=EXIT_USER):
        super().__init__(msg)
        self.code = code


# ---- the trial namelist ----------------------------------------------------------------------

def group_span(n, g):
    """The character span of group g in n.text: from its '&' (or '$') to after its '/' or '&end'."""
    start = 0
    for _ in range(g.line - 1):
        start = n.text.index("\n", start) + 1
    start += g.col - 1 + (1 if g.line == 1 and n.text.startswith("\ufeff") else 0)
    end = g.close + (1 if n.text[g.close] == "/" else 4)
    return start, end


def blank_groups(n, names):
    """n.text with the groups named in `names` replaced by blanks (newlines kept, so every other
    group keeps its line and column)."""
    text = n.text
    for g in n.groups:
        if g.name in names:
            s, e = group_span(n, g)
            text = text[:s] + re.sub(r"[^\n]", " ", text[s:e]) + text[e:]
    return re.sub(r"[ \t]+\n", "\n", text)  # trailing blanks only: no string holds a newline


def where(path, e):
    return "%s:%d:%d" % (path, e.line, e.col)


def read_trial(path):
    """The trial namelist, its &merge_trial settings {key: value} and the method of &merge."""
    try:
        n = nl.read_namelist_file(path)
    except nl.UserError as e:
        raise TrialError(str(e))
    for name in ("merge", "merge_trial"):
        found = [g for g in n.groups if g.name == name]
        if not found:
            raise TrialError("%s:1:1: no &%s group (a merge trial's namelist holds &merge, &merge_trial "
                             "and llmtrain's groups; see inputs/merge-search.nml)" % (path, name))
        if len(found) > 1:
            raise TrialError("%s:%d:%d: a second &%s group (the first is at line %d)"
                             % (path, found[1].line, found[1].col, name, found[0].line))
    settings, at = {}, {}
    for e in n.group("merge_trial").entries:
        key = "weight_I" if re.fullmatch(r"weight_[0-9]+", e.key) else e.key
        if key not in TRIAL_KEYS or (key == "weight_I" and int(e.key[7:]) < 1):
            digits = re.search(r"[0-9]+$", e.key)
            near = [k for k in TRIAL_KEYS if k != "weight_I"] + ["weight_" + (digits.group() if digits else "1")]
            hint = difflib.get_close_matches(e.key, near, 1)
            valid = ", ".join(TRIAL_KEYS).replace("weight_I", "weight_1, weight_2, ...")
            raise TrialError("%s: unknown key '%s' in group '&merge_trial' (valid keys: %s)%s"
                             % (where(path, e), e.key, valid, "; did you mean '%s'?" % hint[0] if hint else ""))
        if e.key in at:
            raise TrialError("%s: &merge_trial %s is given twice (first at line %d)"
                             % (where(path, e), e.key, at[e.key].line))
        kind = TRIAL_KEYS[key][0]
        for v in e.values:
            ok = v.kind == kind or (kind == "real" and v.kind == "integer")
            if not ok:
                raise TrialError("%s:%d:%d: &merge_trial %s expects %s values, got %s %s"
                                 % (path, v.line, v.col, e.key, kind, v.kind, v.raw))
        vals = [float(v.value) if kind == "real" else v.value for v in e.values]
        if kind != "string" and len(vals) != 1:
            raise TrialError("%s: &merge_trial %s takes one value, got %d" % (where(path, e), e.key, len(vals)))
        settings[e.key], at[e.key] = (vals if kind == "string" else vals[0]), e
    sets = settings.get("val_sets")
    if not sets or not all(s.strip() for s in sets):
        e = at.get("val_sets")
        raise TrialError("%s: &merge_trial val_sets is required: one llmtrain &data val_files value "
                         "(glob patterns) per validation set, e.g. val_sets = 'data/a/val_*.bin', "
                         "'data/b/val_*.bin'" % (where(path, e) if e else "%s:%d:%d" % (
                             path, n.group("merge_trial").line, n.group("merge_trial").col)))
    names = settings.get("set_names") or ["set%d" % (i + 1) for i in range(len(sets))]
    if "set_names" in settings:
        e = at["set_names"]
        if len(names) != len(sets):
            raise TrialError("%s: &merge_trial set_names: %d names for %d val_sets"
                             % (where(path, e), len(names), len(sets)))
        for s in names:
            if not re.fullmatch(r"[A-Za-z0-9_]+", s) or s == "max":
                raise TrialError("%s: &merge_trial set_names: '%s' must be letters, digits and '_' "
                                 "(and not 'max'): it names val_loss_%s in metrics.jsonl" % (where(path, e), s, s))
        if len(set(names)) != len(names):
            raise TrialError("%s: &merge_trial set_names: a name is given twice" % where(path, e))
    weights = sorted((int(k[7:]), k) for k in settings if k.startswith("weight_"))
    if "t" in settings and weights:
        raise TrialError("%s: &merge_trial t and %s both set the merge weights: give one of them"
                         % (where(path, at["t"]), weights[0][1]))
    method = nl.namelist_value(n, "merge", "method", "")
    method = method.lower() if isinstance(method, str) else ""
    return n, settings, names, method


def merge_arguments(n, settings, method, out):
    """llmmerge's KEY=VALUE arguments for the trial's weight, and what it merged (for the record)."""
    args, what = ["out=%s" % nl.format_value(out), "overwrite=.true."], {}
    if "t" in settings:
        t = settings["t"]
        what["t"] = t
        if method == "slerp":
            args.append("t=%s" % nl.format_value(t))
            return args, what
        w = [1.0 - t, t]
    else:
        idx = {int(k[7:]): v for k, v in settings.items() if k.startswith("weight_")}
        if not idx:
            return args, what  # &merge's own weights
        given = nl.namelist_value(n, "merge", "weights", [])
        given = given if isinstance(given, list) else [given]
        w = [float(x) for x in given] + [1.0] * max(0, max(idx) - len(given))
        for i, v in idx.items():
            w[i - 1] = v
    what["weights"] = w
    args.append("weights=" + ",".join(nl.format_value(float(x)) for x in w))
    return args, what


# ---- running the programs --------------------------------------------------------------------

class Runner:
    def __init__(self, launcher):
        self.launcher, self.child, self.stopped = launcher, None, None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame):
        if self.stopped is None:
            self.stopped = signum
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signal.SIGTERM)

    def check_stopped(self):
        if self.stopped is not None:
            raise TrialError("stopped by %s (nothing to save: run the trial again)"
                             % signal.Signals(self.stopped).name, EXIT_STOPPED)

    def run(self, what, argv, log_path):
        """Run argv under the launcher with its output in log_path; the wall time."""
        self.check_stopped()
        argv = self.launcher + argv
        t0 = time.time()
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("== merge_trial: %s\n" % sw.command_text(argv))
            log.flush()
            try:
                self.child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            except OSError as e:
                raise TrialError("%s: cannot start %s: %s" % (what, argv[0], e.strerror or e))
            rc = self.child.wait()
            self.child = None
        self.check_stopped()
        if rc != 0:
            reason = first_error(log_path) or "no output"
            raise TrialError("%s exited with %s: %s; log: %s"
                             % (what, rc if rc > 0 else "signal %d" % -rc, reason, log_path),
                             EXIT_USER if rc == EXIT_USER else EXIT_FAILED)
        return time.time() - t0


def first_error(log_path):
    """The program's own message (a line 'llmtrain: error...' or 'llmmerge: error...', not one of
    their warnings), else the first line that reads like an error (a launcher's), else the first
    line; the command line at the top of the log is skipped."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines()[1:] if ln.strip()]
    except OSError:
        return ""
    own = ("llmtrain:", "llmmerge:")
    for test in (lambda ln: ln.startswith(own) and ln.split(":", 2)[1].strip().startswith("error"),
                 lambda ln: ln.startswith(own) and not ln.split(":", 2)[1].strip().startswith("warning"),
                 lambda ln: any(w in ln.lower() for w in sw._REASON_WORDS), lambda ln: True):
        found = [ln for ln in lines if test(ln)]
        if found:
            return found[0][:800]
    return ""


def default_launcher(ranks):
    if os.environ.get("SLURM_JOB_ID") and shutil.which("srun"):
        return ["srun", "--exact", "--ntasks=%d" % ranks, "--cpu-bind=none", "--kill-on-bad-exit=1"]
    return ["mpirun", "-np", str(ranks)]


def eval_loss(log_path):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"eval: val_loss (\S+) over (\d+) batches", line)
            if m:
                return float(m.group(1)), int(m.group(2))
    return None, None


def trial(path, runner, llmmerge, llmtrain):
    n, settings, names, method = read_trial(path)
    out_dir = nl.namelist_value(n, "run", "out_dir", "runs")
    name = nl.namelist_value(n, "run", "name", "run")
    run_dir = os.path.join(str(out_dir), str(name))
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise TrialError("the run directory %s (&run out_dir/name) cannot be made: %s" % (run_dir, e.strerror or e))
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)  # a record only from this attempt
    merged = os.path.join(run_dir, "merged.h5")

    merge_nml = os.path.join(run_dir, "merge.nml")
    sw.atomic_write(merge_nml, blank_groups(n, {g.name for g in n.groups if g.name != "merge"}))
    args, what = merge_arguments(n, settings, method, merged)
    merge_s = runner.run("llmmerge", [llmmerge, merge_nml] + args, os.path.join(run_dir, "merge.log"))
    print("merge_trial: llmmerge %s, %s -> %s (%.1f s)"
          % (method, " ".join(a for a in args if a.startswith(("t=", "weights="))) or "&merge's weights",
             merged, merge_s), flush=True)

    eval_text = nl.parse_namelist(path, blank_groups(n, {"merge", "merge_trial"}))
    losses, batches, eval_s = {}, None, 0.0
    for set_name, val_files in zip(names, settings["val_sets"]):
        o = {("run", "mode"): "eval", ("run", "init_from"): merged, ("run", "out_dir"): run_dir,
             ("run", "name"): "eval_" + set_name, ("checkpoint", "resume"): "none",
             ("data", "val_files"): val_files}
        nml = os.path.join(run_dir, "eval_%s.nml" % set_name)
        header = ("! %s - written by merge_trial.py: %s without &merge and &merge_trial, with %s\n"
                  % (nml, path, nl.overrides_text(o)))
        sw.atomic_write(nml, nl.namelist_with(eval_text, o, header))
        log = os.path.join(run_dir, "eval_%s.log" % set_name)
        what_eval = "evaluation on set %s (val_files '%s')" % (set_name, val_files)
        s = runner.run(what_eval, [llmtrain, nml], log)
        eval_s += s
        loss, nb = eval_loss(log)
        if loss is None or not math.isfinite(loss):
            raise TrialError("%s: no finite 'eval: val_loss' line in its output; log: %s" % (what_eval, log),
                             EXIT_FAILED)
        losses[set_name], batches = loss, nb
        print("merge_trial: set %s: val_loss %.6f over %d batches (%.1f s)" % (set_name, loss, nb, s), flush=True)

    mean = sum(losses.values()) / len(losses)
    keep = settings.get("keep_merged", True)
    if not keep:
        os.unlink(merged)
    record = {"step": 0, "val_loss": mean, "val_loss_max": max(losses.values())}
    record.update(("val_loss_" + k, v) for k, v in losses.items())
    record.update(what)
    record.update({"method": method, "val_batches": batches, "merged": merged if keep else None,
                   "merge_s": round(merge_s, 3), "eval_s": round(eval_s, 3)})
    sw.atomic_write(metrics, json.dumps(record) + "\n")
    print("merge_trial: val_loss %.6f (mean of %s) -> %s"
          % (mean, ", ".join("%s %.6f" % kv for kv in losses.items()), metrics), flush=True)


def main(argv):
    args, opts = argv[1:], {"--ranks": "1", "--launcher": "", "--llmmerge": os.path.join(ROOT, "llmmerge"),
                            "--llmtrain": os.path.join(ROOT, "llmtrain")}
    if args and args[0] in ("-h", "--help"):
        print(USAGE + "\n&merge_trial keys:")
        for key, (kind, text) in TRIAL_KEYS.items():
            print("  %-12s %-8s %s" % (key, kind, text))
        return EXIT_OK
    while args and args[0] in opts:
        if len(args) < 2:
            break
        opts[args[0]], args = args[1], args[2:]
    if len(args) != 1 or args[0].startswith("-") or not re.fullmatch(r"[1-9][0-9]*", opts["--ranks"]):
        print(USAGE, file=sys.stderr)
        return EXIT_USER
    ranks = int(opts["--ranks"])
    try:
        launcher = ([a.replace("{ranks}", str(ranks)) for a in shlex.split(opts["--launcher"])]
                    if opts["--launcher"] else default_launcher(ranks))
    except ValueError as e:
        print("merge_trial: error: --launcher: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USER
    try:
        trial(args[0], Runner(launcher), opts["--llmmerge"], opts["--llmtrain"])
    except TrialError as e:
        print("merge_trial: %s%s" % ("" if e.code == EXIT_STOPPED else "error: ", e), file=sys.stderr, flush=True)
        return e.code
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
