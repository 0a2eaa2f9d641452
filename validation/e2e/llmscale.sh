#!/usr/bin/env bash
# llmscale, end to end on the tiny model through $MPIRUN (timings on a shared machine mean
# nothing: this checks the structure and the arithmetic, not the speed):
#  1. A strong-scaling study over 1x1x1, 2x1x1, 1x1x2 (dp x tp x pp) and 1x3x1 (tp = 3 does not
#     divide n_head = 4): exit 1 with a summary naming the failed grid; results.csv has one row
#     per grid in order; the three good rows have tokens/s > 0 equal to the median, recomputed
#     here from each run's metrics.jsonl, of the steps after the warm-up; speedup = tokens/s /
#     tokens/s of 1x1x1 and efficiency = speedup / ranks, from the CSV's own columns (to the
#     CSV's 6 decimals); global batch 8 in every row; the bad row is 'failed' with exit code 2 and
#     its log, which holds llmtrain's message; results.md and scaling.png (a PNG) exist.
#  2. One MFU reference for the study: every run.nml has the same &log peak_flops, equal to the
#     hardware peak the calibration run printed; every good run's log says it used it; and from
#     the metrics alone, mfu x ranks / tokens_per_s (= FLOP per token / peak) is the same in every
#     step record of every run (to 2%: mfu has 5 decimals).
#  3. Resumable: the same command again keeps the three finished rows (their logs untouched) and
#     runs only the failed grid again.
#  4. Weak scaling with --peak-flops 5e10: global batch 8 at dp 1 and 16 at dp 2 in the CSV, in
#     run.nml, and in the tokens the runs trained (metrics 'tokens' = steps x batch x seq_len);
#     exit 0. Strong scaling's micro-batch choice (llmscale.batches) for dp 4 and 16.
#  5. srun job steps (a fake srun that logs its arguments and runs mpirun): --exclusive
#     --ntasks=R per run on ceil(R / SLURM_NTASKS_PER_NODE) nodes, --launcher-args passed on; a
#     grid larger than SLURM_NTASKS is refused.
#  6. Bad arguments: one line on stderr and exit 2, no run started.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
[ -x ./llmscale ] || make -s llmscale >/dev/null || fail "make llmscale failed"
$PYTHON -c "import matplotlib" 2>/dev/null || { echo "SKIP: matplotlib is not installed (python3-matplotlib)"; exit 77; }
unset SLURM_JOB_ID SLURM_NTASKS SLURM_NPROCS  # mpirun unless a section asks for (fake) srun
T0=$(date +%s)
write_tiny_nml "$TEST_DIR/base.nml" max_steps=50
S=$TEST_DIR/strong
STRONG=(./llmscale "$TEST_DIR/base.nml" --grids 1x1x1,2x1x1,1x1x2,1x3x1 --mode strong --steps 6 --warmup 2
        --out "$S" --launcher mpirun --trainer ./llmtrain)

echo "== 1. strong scaling, 4 grids (one bad)"
"${STRONG[@]}" >"$TEST_DIR/strong.out" 2>&1
rc=$?
tail -1 "$TEST_DIR/strong.out"
[ $rc -eq 1 ] || { cat "$TEST_DIR/strong.out"; fail "strong study: exit $rc, expected 1 (one run failed)"; }
grep -q "study done: 4 runs, 3 ok, 1 failed (dp1-tp3-pp1 exit 2)" "$TEST_DIR/strong.out" || fail "no summary naming the failed grid"
$PYTHON - "$S" <<'PY' || fail "strong study: the table does not check out"
import csv, json, os, statistics, sys
S = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(S, "results.csv"))))
grids = [r["grid"] for r in rows]
assert grids == ["dp1-tp1-pp1", "dp2-tp1-pp1", "dp1-tp1-pp2", "dp1-tp3-pp1"], grids
ok = [r for r in rows if r["status"] == "ok"]
assert len(ok) == 3, [r["status"] for r in rows]
ref = float(ok[0]["tokens_per_s"])
for r in ok:
    tok, ranks = float(r["tokens_per_s"]), int(r["ranks"])
    assert tok > 0, r
    assert int(r["global_batch"]) == 8 and r["exit_code"] == "0", r
    assert ranks == int(r["dp"]) * int(r["tp"]) * int(r["pp"]), r
    recs = [json.loads(l) for l in open(os.path.join(S, "runs", r["grid"], "metrics.jsonl"))]
    steps = [x for x in recs if "tokens_per_s" in x and x["step"] > 2]
    assert len(steps) == 4 == int(r["steps_measured"]), (r["grid"], len(steps))
    med = statistics.median(x["tokens_per_s"] for x in steps)
    assert abs(med - tok) <= 1e-3, (r["grid"], med, tok)
    speedup, eff = float(r["speedup"]), float(r["efficiency"])
    assert abs(speedup - tok / ref) <= 1e-6 * max(1, speedup) + 5e-7, (r["grid"], speedup, tok / ref)
    assert abs(eff - speedup / ranks) <= 2e-6, (r["grid"], eff, speedup / ranks)
    assert float(r["ideal"]) == ranks, r
    print("%s: %d ranks, %.0f tokens/s, speedup %.4f, efficiency %.4f = %.4f / %d" % (
        r["grid"], ranks, tok, speedup, eff, speedup, ranks))
bad = rows[3]
assert bad["status"] == "failed" and bad["exit_code"] == "2", bad
assert bad["tokens_per_s"] == "" and bad["efficiency"] == "", bad
assert "tp = 3 must divide" in open(bad["log"]).read() and "tp = 3 must divide" in bad["reason"], bad
md = open(os.path.join(S, "results.md")).read()
assert all("| %sx%sx%s |" % (r["dp"], r["tp"], r["pp"]) in md for r in rows), md
assert open(os.path.join(S, "scaling.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
print("bad grid: failed row, exit 2, log %s" % bad["log"])
PY

echo "== 2. one MFU reference"
peak_gf=$(sed -n 's/.*MFU reference: hardware peak \([0-9.]*\) GFLOP.*/\1/p' "$S"/calibration/*/run.log)
[ -n "$peak_gf" ] || fail "the calibration run printed no MFU reference"
values=$(grep -h '^ *peak_flops *=' "$S"/runs/*/run.nml | sort -u)
[ "$(grep -c . <<<"$values")" -eq 1 ] || fail "run.nml files differ in peak_flops: $values"
[ "$(ls "$S"/runs/*/run.nml | wc -l)" -eq 4 ] || fail "expected 4 run.nml files"
$PYTHON - "$S" "$peak_gf" "$values" <<'PY' || fail "the runs do not share one MFU reference"
import glob, json, os, sys
S, peak_gf, line = sys.argv[1], float(sys.argv[2]), sys.argv[3]
peak = float(line.split("=")[1])
assert abs(peak - peak_gf * 1e9) < 1e-6 * peak, (peak, peak_gf)
assert ("%.1f GFLOP/s" % peak_gf) in open(os.path.join(S, "results.md")).read()
ratios = []
for g, ranks in (("dp1-tp1-pp1", 1), ("dp2-tp1-pp1", 2), ("dp1-tp1-pp2", 2)):
    log = open(os.path.join(S, "runs", g, "run.log")).read()
    assert "MFU reference: hardware peak %.1f GFLOP/s per rank (&log peak_flops)" % (peak / 1e9) in log, g
    for x in map(json.loads, open(os.path.join(S, "runs", g, "metrics.jsonl"))):
        if "mfu" in x:
            ratios.append(x["mfu"] * ranks / x["tokens_per_s"])
spread = max(ratios) / min(ratios) - 1
assert spread < 0.02, spread
print("&log peak_flops = %g in every run (calibration: %.1f GFLOP/s); mfu x ranks / tokens_per_s "
      "agrees across %d steps of 3 runs to %.1e" % (peak, peak_gf, len(ratios), spread))
PY

echo "== 3. the same study again: finished rows kept"
sums=$(md5sum "$S"/runs/dp{1-tp1-pp1,2-tp1-pp1,1-tp1-pp2}/run.log)
"${STRONG[@]}" >"$TEST_DIR/again.out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "second run: exit $rc, expected 1"
[ "$(grep -c 'finished in an earlier llmscale, kept' "$TEST_DIR/again.out")" -eq 3 ] || fail "second run: not 3 rows kept"
grep -q "dp1-tp3-pp1: 3 ranks" "$TEST_DIR/again.out" || fail "second run: the failed grid was not run again"
[ "$sums" = "$(md5sum "$S"/runs/dp{1-tp1-pp1,2-tp1-pp1,1-tp1-pp2}/run.log)" ] || fail "second run: a finished run ran again"
grep -q calibration "$TEST_DIR/again.out" && fail "second run: calibrated again"
[ "$(grep -c '^dp' "$S/results.csv")" -eq 4 ] || fail "second run: results.csv lost rows"
echo "3 rows kept, the failed one run again"

echo "== 4. weak scaling"
W=$TEST_DIR/weak
./llmscale "$TEST_DIR/base.nml" --grids 1x1x1,2x1x1 --mode weak --steps 4 --warmup 1 --peak-flops 5e10 \
    --out "$W" --launcher mpirun --trainer ./llmtrain >"$TEST_DIR/weak.out" 2>&1 ||
    { cat "$TEST_DIR/weak.out"; fail "weak study: exit $?"; }
[ ! -d "$W/calibration" ] || fail "weak study: calibrated although --peak-flops was given"
$PYTHON - "$W" <<'PY' || fail "weak study: the global batch is not scaled with dp"
import csv, json, os, re, sys
W = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(W, "results.csv"))))
for r, gb in zip(rows, (8, 16)):
    assert r["status"] == "ok" and int(r["global_batch"]) == gb and int(r["micro_batch"]) == 4, r
    nml = open(os.path.join(W, "runs", r["grid"], "run.nml")).read()
    assert re.search(r"^[^!\n]*\bglobal_batch = %d\b" % gb, nml, re.M), (r["grid"], "global_batch")
    assert re.search(r"^[^!\n]*\bpeak_flops = 50000000000\.0\b", nml, re.M), (r["grid"], "peak_flops")
    assert "hardware peak 50.0 GFLOP/s per rank (&log peak_flops)" in open(r["log"]).read()
    last = [json.loads(l) for l in open(os.path.join(W, "runs", r["grid"], "metrics.jsonl"))][-1]
    assert last["step"] == 4 and last["tokens"] == 4 * gb * 32, last
    print("%s: global batch %d, %d tokens in 4 steps" % (r["grid"], gb, last["tokens"]))
sys.path.insert(0, "src/tools")
import llmscale
assert llmscale.batches("strong", (4, 1, 1), 8, 4, 1) == (8, 2)    # micro_batch 4 x dp 4 > 8
assert llmscale.batches("strong", (16, 1, 1), 8, 4, 1) == (8, 4)   # no split: llmtrain refuses it
assert llmscale.batches("weak", (4, 1, 2), 16, 4, 2) == (32, 4)    # 8 per dp rank of the base
PY

echo "== 5. srun job steps"
mkdir -p "$TEST_DIR/bin"
cat >"$TEST_DIR/bin/srun" <<SH
#!/bin/sh
# fake srun: log the arguments, start the program after the options with \$MPIRUN -np ntasks
echo "\$*" >>"$TEST_DIR/srun.args"
n=1
while [ \$# -gt 0 ]; do case "\$1" in --ntasks=*) n=\${1#--ntasks=}; shift ;; --*) shift ;; *) break ;; esac; done
exec $MPIRUN -np \$n "\$@"
SH
chmod +x "$TEST_DIR/bin/srun"
PATH=$TEST_DIR/bin:$PATH SLURM_JOB_ID=1 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=1 ./llmscale "$TEST_DIR/base.nml" --grids 1x1x1,2x1x1 \
    --steps 3 --warmup 1 --peak-flops 5e10 --out "$TEST_DIR/srun" --launcher-args=--mpi=pmix --trainer ./llmtrain \
    >"$TEST_DIR/srun.out" 2>&1 || { cat "$TEST_DIR/srun.out"; fail "srun study: exit $?"; }
cat "$TEST_DIR/srun.args"
for n in 1 2; do
    grep -q -- "^--exclusive --ntasks=$n --cpu-bind=none --kill-on-bad-exit=1 --job-name=llmscale-dp$n-tp1-pp1 --nodes=$n --ntasks-per-node=1 --mpi=pmix ./llmtrain " \
        "$TEST_DIR/srun.args" || fail "srun: no job step of $n ranks on $n nodes with --exclusive (see $TEST_DIR/srun.args)"
done
[ "$(grep -c '^dp.*,ok,' "$TEST_DIR/srun/results.csv")" -eq 2 ] || fail "srun: not 2 ok rows"
PATH=$TEST_DIR/bin:$PATH SLURM_JOB_ID=1 SLURM_NTASKS=1 ./llmscale "$TEST_DIR/base.nml" --grids 1x1x1,2x1x1 \
    --out "$TEST_DIR/srun1" >"$TEST_DIR/srun1.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "grid dp2-tp1-pp1 needs 2 ranks, but this Slurm allocation has 1 tasks" "$TEST_DIR/srun1.out" ||
    fail "srun: a grid larger than the allocation: exit $rc: $(cat "$TEST_DIR/srun1.out")"

echo "== 6. bad arguments"
n=0
bad() {  # bad 'expected text' ARGS...
    n=$((n + 1))
    local want=$1; shift
    ./llmscale "$@" >"$TEST_DIR/bad$n.out" 2>"$TEST_DIR/bad$n.err"
    local rc=$?
    printf 'case %d: exit %d: %s\n' $n $rc "$(cat "$TEST_DIR/bad$n.err")"
    [ $rc -eq 2 ] || fail "bad case $n: exit $rc, expected 2"
    [ "$(wc -l <"$TEST_DIR/bad$n.err")" -eq 1 ] || fail "bad case $n: not one line on stderr"
    grep -qF -- "$want" "$TEST_DIR/bad$n.err" || fail "bad case $n: the message lacks '$want'"
    [ ! -d "$TEST_DIR/b$n/runs" ] || fail "bad case $n: a run was started"
}
B=$TEST_DIR/base.nml
bad "the base namelist is missing" --grids 1x1x1
bad "give one of --grids DPxTPxPP,... or --ranks N,..." "$B" --out "$TEST_DIR/b2"
bad "give one of --grids" "$B" --grids 1x1x1 --ranks 1 --out "$TEST_DIR/b3"
bad "--grids: '1x2' is not DPxTPxPP" "$B" --grids 1x1x1,1x2 --out "$TEST_DIR/b4"
bad "--grids: 2x1x1 is given twice" "$B" --grids 2x1x1,2x1x1 --out "$TEST_DIR/b5"
bad "--grids: '0x1x1' is not DPxTPxPP" "$B" --grids 0x1x1 --out "$TEST_DIR/b6"
bad "argument --mode: invalid choice: 'medium'" "$B" --grids 1x1x1 --mode medium --out "$TEST_DIR/b7"
bad "--steps 0: a run needs at least 1 step" "$B" --grids 1x1x1 --steps 0 --out "$TEST_DIR/b8"
bad "--warmup 5 must be at least 0 and below --steps 5" "$B" --grids 1x1x1 --steps 5 --warmup 5 --out "$TEST_DIR/b9"
bad "--peak-flops -1 must be a FLOP/s per rank" "$B" --grids 1x1x1 --peak-flops -1 --out "$TEST_DIR/b10"
bad "argument --steps: invalid int value: 'many'" "$B" --grids 1x1x1 --steps many --out "$TEST_DIR/b11"
bad "$TEST_DIR/missing.nml: No such file or directory" "$TEST_DIR/missing.nml" --grids 1x1x1 --out "$TEST_DIR/b12"
bad "--ranks: 'two' is not a positive integer" "$B" --ranks 1,two --out "$TEST_DIR/b13"
bad "holds a study with another mode (strong, now weak)" "$B" --grids 1x1x1 --mode weak --steps 6 --out "$S"
bad "the 2 finished rows of $W were measured against &log peak_flops = 5e+10" "$B" --grids 1x1x1,2x1x1 --mode weak \
    --steps 4 --peak-flops 6e10 --out "$W"
bad "no study has run there yet" --report --out "$TEST_DIR/b16"
bad "unrecognized arguments: --submit" "$B" --grids 1x1x1 --submit --out "$TEST_DIR/b17"
./llmscale --report --out "$S" >/dev/null || fail "--report of the strong study failed"
echo "llmscale: $n bad-argument cases, each one message and exit 2; $(($(date +%s) - T0)) s"
