#!/usr/bin/env bash
# recompute_bench.sh — what activation recomputation costs and saves (not a test): one model
# (default L=4, C=256, 4 heads, T=256, micro_batch 4, vocab 500, so the blocks dominate) trained
# with &parallel recompute = 'none', 'selective' and 'full', ROUNDS times each, interleaved in one
# run so that load on the machine hits all three alike. Reports the activation memory of one slot
# and the head/scratch memory (startup memory plan), the median step time over the steady steps
# of all rounds (and the fastest step, the one least disturbed by other load on a shared machine),
# and their ratios to 'none'. Writes build/bench/recompute.md.
# THREADS (default 2), STEPS (default 10), ROUNDS (default 3), MODEL ("L,C,NH,T,B") can be set.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${THREADS:=2}" "${STEPS:=10}"
: "${ROUNDS:=3}" "${MODEL:=4,256,4,256,4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/bench/recompute
mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
IFS=, read -r L C NH T B <<<"$MODEL"
MODES="none selective full"
for r in $(seq "$ROUNDS"); do
    for mode in $MODES; do
        name=${mode}_$r
        cat >$OUT/$name.nml <<NML
&run name = '$name', out_dir = '$OUT' /
&model n_layer = $L, n_head = $NH, d_model = $C, vocab_size = 500, seq_len = $T /
&parallel recompute = '$mode' /
&train max_steps = $STEPS, micro_batch = $B, lr = 1e-3, warmup_steps = 0 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = $STEPS /
NML
        OMP_NUM_THREADS=$THREADS $MPIRUN -np 1 --bind-to none ./llmtrain $OUT/$name.nml >$OUT/$name.log 2>&1 ||
            { tail -20 $OUT/$name.log; echo "llmtrain failed"; exit 1; }
    done
done
$PYTHON - "$OUT" "$ROUNDS" "L=$L C=$C heads=$NH T=$T micro_batch=$B, $THREADS threads" $MODES <<'PY' | tee build/bench/recompute.md
import json, re, statistics, sys
out, rounds, what, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rows = {}
for mode in modes:
    ms = []
    for r in range(1, rounds + 1):
        steps = [json.loads(l) for l in open(f"{out}/{mode}_{r}/metrics.jsonl") if '"loss"' in l]
        ms += [s["ms"] for s in steps[2:]]  # the first steps pay page faults and warm-up
        plan = open(f"{out}/{mode}_{r}.log").read()
    slot, head = re.search(r"activations \(rank 0\): \d+ slots? x ([0-9.]+) MiB \+ head/scratch ([0-9.]+) MiB", plan).groups()
    rows[mode] = (float(slot), float(head), statistics.median(ms), min(ms), len(ms))
print(f"recompute: {what}, {rows[modes[0]][4]} steady steps of {rounds} interleaved runs\n")
print("| recompute | activations per slot MiB | head/scratch MiB | median step ms | vs none | fastest step ms | vs none |")
print("|---|---|---|---|---|---|---|")
n = rows["none"]
for mode in modes:
    slot, head, med, best, _ = rows[mode]
    print(f"| {mode} | {slot:.1f} | {head:.1f} | {med:.1f} | {med / n[2]:.3f} | {best:.1f} | {best / n[3]:.3f} |")
PY
