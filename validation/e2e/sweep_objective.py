#!/usr/bin/env python3
"""sweep_objective.py — a stand-in for llmtrain in llmsweep's tests: analytic objectives, instantly.

    sweep_objective.py TRIAL.nml

Reads the trial's namelist the way llmtrain would (nml.py, the tools' reader, the same syntax), "trains"
&train max_steps steps and appends llmtrain-like records to out_dir/name/metrics.jsonl:
{"step", "loss", "tokens"} and {"step", "val_loss", "true_value", "resumed_from"}. The value is
f(x) + curve / step, so a run reports a learning curve whose order across trials is f's order.
With &checkpoint resume = 'auto' it continues from its own checkpoint (objective_ckpt.json, written
every &checkpoint every steps and at the end), like llmtrain; SIGTERM saves it and exits 75.

&objective keys: function ('branin' | 'quadratic'), x1, x2 (branin), noise [0] (quadratic: a normal
draw keyed by seed and trial name), curve [0], sleep_s [0] (once), step_sleep_s [0] (per step),
fail_x1_above [none: trials with x1 above it exit 3]. quadratic reads &train lr, warmup_steps and
&model d_model. Unknown &objective keys are refused with exit 2 and a file:line:col message.
"""
import json
import math
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "tools"))
import nml  # noqa: E402  (the namelist reader only: no numpy)

OBJECTIVE_KEYS = {"function", "x1", "x2", "noise", "curve", "sleep_s", "step_sleep_s", "fail_x1_above"}
BRANIN_MIN = 0.397887357729738


def branin(x1, x2):
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


def quadratic(lr, warmup, width):
    return (math.log10(lr / 1e-3)) ** 2 + ((warmup - 50) / 100.0) ** 2 + {64: 0.3, 128: 0.0, 256: 0.15}.get(width, 1.0)


def main(path):
    try:
        nl = nml.read_namelist_file(path)
    except nml.UserError as e:
        print("objective: %s" % e, file=sys.stderr)
        return 2
    objective = nl.group("objective")
    for e in objective.entries if objective else []:
        if e.key not in OBJECTIVE_KEYS:
            print("objective: %s:%d:%d: unknown key '%s' in group '&objective'" % (path, e.line, e.col, e.key), file=sys.stderr)
            return 2

    def val(group, key, default):
        return nml.namelist_value(nl, group, key, default)

    run_dir = os.path.join(val("run", "out_dir", "runs"), val("run", "name", "run"))
    os.makedirs(run_dir, exist_ok=True)
    max_steps = val("train", "max_steps", 100)
    every = val("checkpoint", "every", 0)
    tokens_per_step = (val("train", "global_batch", 0) or val("train", "micro_batch", 4)) * val("model", "seq_len", 1024)
    fn = val("objective", "function", "branin")
    if fn == "branin":
        x1, x2 = float(val("objective", "x1", 0.0)), float(val("objective", "x2", 0.0))
        true = branin(x1, x2)
    else:
        true = quadratic(float(val("train", "lr", 6e-4)), val("train", "warmup_steps", 0), val("model", "d_model", 768))
    noise = float(val("objective", "noise", 0.0))
    rng = random.Random("%s/%s" % (val("run", "seed", 1337), val("run", "name", "run")))
    observed = true + (rng.gauss(0.0, noise) if noise > 0 else 0.0)
    curve = float(val("objective", "curve", 0.0))
    if max_steps == 0:
        return 0  # llmsweep's preflight: the namelist was read
    if fn == "branin" and x1 > float(val("objective", "fail_x1_above", float("inf"))):
        print("objective: error: x1 = %g is above fail_x1_above: failing on purpose" % x1, file=sys.stderr)
        return 3
    time.sleep(float(val("objective", "sleep_s", 0.0)))

    ckpt = os.path.join(run_dir, "objective_ckpt.json")
    start = 0
    if val("checkpoint", "resume", "none") == "auto" and os.path.exists(ckpt):
        with open(ckpt) as f:
            start = json.load(f)["step"]
    stop = []
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))

    def save(step):
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)

    metrics = open(os.path.join(run_dir, "metrics.jsonl"), "a")
    step_sleep = float(val("objective", "step_sleep_s", 0.0))
    step = start
    while step < max_steps:
        time.sleep(step_sleep)
        step += 1
        if every and step % every == 0:
            save(step)
        if stop:
            save(step)
            metrics.write(json.dumps({"step": step, "stopped_by": "SIGTERM", "exit_code": 75}) + "\n")
            return 75
    save(step)
    value = observed + (curve / step if step else 0.0)
    metrics.write(json.dumps({"step": step, "loss": value, "tokens": step * tokens_per_step}) + "\n")
    metrics.write(json.dumps({"step": step, "val_loss": value, "true_value": true, "resumed_from": start}) + "\n")
    metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
