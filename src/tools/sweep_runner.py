"""sweep_runner — llmsweep's study loop (Runner): proposing trials (grid, random, Bayesian),
starting them as job steps or mpirun, ASHA rungs, budgets, failures, signals and requeue.
Uses: nml.py, sweep_space, sweep_state. Used by: llmsweep.
"""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import time

from nml import (UserError, namelist_with, overrides_text)  # nml.py, beside this file
from sweep_space import (_numpy, encode_point, EXIT_FAILURES, EXIT_OK, EXIT_REQUEUE, propose_bayes)
from sweep_state import (_alive, _child_setup, _is_finite, _log_reason, _proc_start_ticks,
                         atomic_write, command_text, format_params, metric_at, NO_SAVES, now_iso,
                         read_metrics, segment_end, start_child, tokens_per_step, trial_command,
                         trial_name, trial_overrides)
from sweep_report import (write_results, write_tables)


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
        rng = _numpy().random.default_rng([c["seed"], index])
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
