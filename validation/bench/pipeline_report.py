#!/usr/bin/env python3
"""Turn llmtrain's end-of-run time-split tables into the parallelism measurements of docs/benchmarks.md.

For each run log given: per rank, the measured bytes sent per step on each communicator next to
the analytic count (computed here from the model shape, independently of the C code), the
pipeline bubble (p2p wait / step time) next to (p-1)/(m+p-1), the peak number of micro-batches
in flight and their activation memory (1F1B vs GPipe), and the time split per step.

usage: pipeline_report.py RUN.log [RUN.log ...]   (each log starts with the effective namelist)
"""
import json
import re
import sys


def settings(log):
    text = open(log).read()
    cfg = {}
    for k in ("n_layer", "n_head", "d_model", "d_ff", "vocab_size", "seq_len", "dp", "tp", "pp",
              "micro_batch", "global_batch", "schedule"):
        m = re.search(r"^\s+%s\s+=\s+'?([\w.]+)'?" % k, text, re.M)
        cfg[k] = m.group(1) if k == "schedule" else int(float(m.group(1)))
    stages = [tuple(map(int, s)) for s in re.findall(r"\[(\d+),(\d+)\)", text.split("pipeline:")[1].split("\n")[0])] \
        if "pipeline:" in text else [(0, cfg["n_layer"])]
    rows = []
    table = text.split("time split per step")[1].splitlines()[2:]
    for line in table:
        f = line.split()
        if len(f) != 10 or not f[0].isdigit():
            break
        rows.append(dict(zip(["rank", "stage", "tp_ms", "pp_ms", "dp_ms", "tp_mib", "pp_mib", "dp_mib",
                              "inflight", "act_mib"], map(float, f))))
    steps = [json.loads(l) for l in open(log.replace(".log", "") + "/metrics.jsonl") if '"loss"' in l]
    step_ms = sorted(r["ms"] for r in steps[1:])[len(steps[1:]) // 2]
    return cfg, stages, rows, step_ms


def analytic(cfg, stages, stage):
    """Payload bytes one rank of `stage` sends per step, per communicator (fp32)."""
    C, F, V, T, tp, pp = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"], cfg["seq_len"], cfg["tp"], cfg["pp"]
    Vp = (V + 127) // 128 * 128
    N = cfg["micro_batch"] * T
    m = cfg["global_batch"] // (cfg["micro_batch"] * cfg["dp"])
    first, last = stage == 0, stage == pp - 1
    layers = stages[stage][1] - stages[stage][0]
    pp_b = m * N * C * 4 * ((not last) + (not first)) if pp > 1 else 0
    tp_floats = layers * 4 * N * C + (N * C if first else 0) + (N * C + 3 * N if last else 0)
    tp_b = m * tp_floats * 4 if tp > 1 else 0
    per_layer = (3 * C * C + 3 * C) / tp + C * C / tp + C + (F * C + F) / tp + F * C / tp + C + 4 * C
    params = layers * per_layer + (Vp * C / tp + T * C if first else 0) + \
        (2 * C + (Vp * C / tp if not first else 0) if last else 0)
    dp_b = params * 4 if cfg["dp"] > 1 else 0
    return tp_b / 2**20, pp_b / 2**20, dp_b / 2**20, m


def main():
    for log in sys.argv[1:]:
        cfg, stages, rows, step_ms = settings(log)
        p = cfg["pp"]
        print("### %s: dp=%d tp=%d pp=%d, schedule %s, %d layers, median step %.1f ms\n"
              % (log.split("/")[-1], cfg["dp"], cfg["tp"], p, cfg["schedule"], cfg["n_layer"], step_ms))
        print("| rank | stage | in flight (peak) | activations MiB | bubble measured | (p-1)/(m+p-1) "
              "| tp MiB meas/analytic | pp MiB meas/analytic | dp MiB meas/analytic "
              "| ms: tp all-reduce / p2p wait / dp wait / rest |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            tp_a, pp_a, dp_a, m = analytic(cfg, stages, int(r["stage"]))
            bubble = r["pp_ms"] / step_ms
            rest = step_ms - r["tp_ms"] - r["pp_ms"] - r["dp_ms"]
            print("| %d | %d | %d | %.2f | %.2f | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | "
                  "%.1f / %.1f / %.1f / %.1f |"
                  % (r["rank"], r["stage"], r["inflight"], r["act_mib"], bubble, (p - 1) / (m + p - 1),
                     r["tp_mib"], tp_a, r["pp_mib"], pp_a, r["dp_mib"], dp_a,
                     r["tp_ms"], r["pp_ms"], r["dp_ms"], rest))
        print()


if __name__ == "__main__":
    main()
