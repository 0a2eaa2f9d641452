#!/usr/bin/env python3
"""check_trace.py TRACE METRICS DP PP ACCUM FIRST LAST — checks llmtrain's trace.json against
an independent reading of the run: the JSON loads (as chrome://tracing and Perfetto need: a
traceEvents list of "X" events with ts/dur in microseconds, "M" metadata); one process per world
rank named "rank r (dp d, tp t, pp p)" by the grid rule (tp fastest, pp slowest); on one track
the events nest (no partial overlap); every rank has, in every profiled step, one forward and one
backward per micro-batch tagged with its stage, p2p waits, the dp all-reduce, one optimizer;
clocks agree across ranks (stage s+1's forward of micro-batch i starts after stage s's ends);
and stage 0's bubble in the trace agrees with the step record of metrics.jsonl:
  - the step event's duration vs the record's "ms": within 0.5 ms + 2%;
  - the p2p waits summed vs "ms_pp_wait" (the same waits timed by comm.c): 0.05 ms + 2%;
  - the idle time (step minus stage 0's own work: data, forward, backward, optimizer, and the
    other collectives) vs "ms_pp_wait": the difference is the untraced gaps, within
    max(1 ms, 10% of the step).
Prints the numbers it compared."""
import json, sys, collections

trace, metrics = sys.argv[1], sys.argv[2]
dp, pp, accum, first, last = (int(x) for x in sys.argv[3:8])
world = dp * pp
bad = []

doc = json.load(open(trace))
events = doc["traceEvents"]
X = [e for e in events if e["ph"] == "X"]
M = [e for e in events if e["ph"] == "M"]
for e in X:
    for k in ("name", "pid", "tid", "ts", "dur", "args"):
        if k not in e: bad.append("event without %s: %s" % (k, e))
    if e["dur"] < 0: bad.append("negative duration: %s" % e)

names = {e["pid"]: e["args"]["name"] for e in M if e["name"] == "process_name"}
for r in range(world):
    d, p = r % dp, r // dp   # tp = 1
    want = "rank %d (dp %d, tp 0, pp %d)" % (r, d, p)
    if names.get(r) != want: bad.append("process_name of %d: %r, expected %r" % (r, names.get(r), want))

by_rank = collections.defaultdict(list)
for e in X: by_rank[e["pid"]].append(e)
if sorted(by_rank) != list(range(world)): bad.append("ranks with events: %s" % sorted(by_rank))

# nesting on the one track of each rank
for r, evs in by_rank.items():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in evs:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3: stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
            bad.append("rank %d: %s at %.3f overlaps %s partly" % (r, e["name"], e["ts"], stack[-1]["name"]))
            break
        stack.append(e)

steps = range(first, last + 1)
def of(r, name, step): return [e for e in by_rank[r] if e["name"] == name and e["args"]["step"] == step]
for r in range(world):
    stage = r // dp
    for s in steps:
        for name in ("forward", "backward"):
            got = sorted(e["args"]["mb"] for e in of(r, name, s))
            if got != list(range(accum)): bad.append("rank %d step %d: %s micro-batches %s" % (r, s, name, got))
            if any(e["args"]["stage"] != stage for e in of(r, name, s)): bad.append("rank %d: %s stage" % (r, name))
        recv = of(r, "p2p recv wait", s)
        if len(recv) != accum or any(e["args"].get("bytes", 0) <= 0 for e in recv):
            bad.append("rank %d step %d: %d p2p recv waits with bytes, expected %d" % (r, s, len(recv), accum))
        if len(of(r, "p2p send start", s)) != accum: bad.append("rank %d step %d: p2p send starts" % (r, s))
        if not of(r, "dp all-reduce start", s) or not of(r, "dp all-reduce wait", s):
            bad.append("rank %d step %d: no dp all-reduce" % (r, s))
        if len(of(r, "optimizer", s)) != 1 or len(of(r, "step", s)) != 1:
            bad.append("rank %d step %d: optimizer/step events" % (r, s))

# clocks: stage p+1's forward of micro-batch i after stage p's (same dp replica)
worst = 0.0
for s in steps:
    for d in range(dp):
        for p in range(pp - 1):
            a = {e["args"]["mb"]: e for e in of(p * dp + d, "forward", s)}
            b = {e["args"]["mb"]: e for e in of((p + 1) * dp + d, "forward", s)}
            for i in a:
                lag = (a[i]["ts"] + a[i]["dur"]) - b[i]["ts"]
                worst = max(worst, lag)
if worst > 100: bad.append("a later stage's forward starts %.1f us before the earlier stage's ends" % worst)
print("clocks: later stage starts at worst %.1f us before the earlier one ends (tolerance 100 us)" % max(worst, 0))

records = {}
for line in open(metrics):
    rec = json.loads(line)
    if "loss" in rec: records[rec["step"]] = rec
OWN = {"data", "forward", "backward", "optimizer"}
for s in steps:
    rec = records[s]
    step = of(0, "step", s)[0]
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    inside = [e for e in by_rank[0] if t0 <= e["ts"] and e["ts"] + e["dur"] <= t1 + 1e-3 and e is not step]
    # direct children of the step event (nesting checked above)
    top, end = [], -1.0
    for e in sorted(inside, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end - 1e-3:
            top.append(e)
            end = e["ts"] + e["dur"]
    waits = sum(e["dur"] for e in top if e["name"].startswith("p2p") and e["name"].endswith("wait")) / 1e3
    busy = sum(e["dur"] for e in top if not (e["name"].startswith("p2p") and e["name"].endswith("wait"))) / 1e3
    ms, pp_wait = step["dur"] / 1e3, rec["ms_pp_wait"]
    idle = ms - busy
    print("step %d stage 0: step %.3f ms (record %.3f), p2p waits %.3f ms (record ms_pp_wait %.3f), "
          "idle %.3f ms, untraced gaps %.3f ms" % (s, ms, rec["ms"], waits, pp_wait, idle, idle - waits))
    if abs(ms - rec["ms"]) > 0.5 + 0.02 * rec["ms"]: bad.append("step %d: step time %.3f vs %.3f" % (s, ms, rec["ms"]))
    if abs(waits - pp_wait) > 0.05 + 0.02 * pp_wait: bad.append("step %d: p2p waits %.3f vs %.3f" % (s, waits, pp_wait))
    if abs(idle - pp_wait) > max(1.0, 0.1 * ms): bad.append("step %d: idle %.3f vs ms_pp_wait %.3f" % (s, idle, pp_wait))

print("%d events on %d ranks, steps %d..%d" % (len(X), world, first, last))
if bad:
    print("FAIL:\n  " + "\n  ".join(bad[:20]))
    sys.exit(1)
