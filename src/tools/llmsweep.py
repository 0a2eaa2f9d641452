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
with two groups: &sweep (the settings, SWEEP_KEYS in sweep_space.py) and &space, whose entries
name a key of the base namelist as group.key and give its range:

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

The code, beside this file: sweep_space.py (the study file, the space, the GP + EI sampler),
sweep_state.py (the state file, trial namelists and metrics, the launcher), sweep_runner.py (the
study loop), sweep_report.py (results, best.nml, plots); this file is the command line.
"""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nml import (UserError, format_value, namelist_with)  # noqa: E402  (nml.py, beside this file)
# The study lives in the modules beside this file (each one's docstring says what it owns); some
# names are imported here only so that llmscale.py and merge_trial.py (`import llmsweep as sw`)
# find them: the launcher, process and state-file helpers.
from sweep_space import (_int_env, _numpy, _slurm_tasks_per_node, auto_launcher, EXIT_FAILURES,
                         EXIT_OK, EXIT_REQUEUE, EXIT_USER, expected_improvement, GP, propose_bayes,
                         Study, SWEEP_KEYS)  # noqa: E402
from sweep_state import (_log_reason, _REASON_WORDS, atomic_write, clear_checkpoint_dir,
                         command_text, launcher_argv, NO_SAVES, now_iso, read_metrics,
                         read_state_file, start_child, State, trial_command, trial_name,
                         trial_overrides, write_state_file)  # noqa: E402
from sweep_report import (best_trial, write_results)  # noqa: E402
from sweep_runner import Runner  # noqa: E402


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
