#!/usr/bin/env bash
# memory_bench.sh — what ZeRO and recomputation save and cost (not a test). Part 1, measured: one
# model (default L=8, C=256, 4 heads, T=128, vocab 500, micro_batch 2, global batch 16) on
# dp 4 x tp 1 x pp 1, 1F1B, for zero_stage 0..3 x recompute none/selective/full, all twelve
# interleaved in each of ROUNDS rounds so machine load hits them alike, and ZeRO-3 with its
# gathered blocks resident for the step (zero3_resident) beside it: per-rank peak of each
# memory category (the end-of-run table, rank 0, measured), the planner's total for it, and the
# median step time over the steady steps of all rounds. Part 2, planned: the largest model of
# d_model 2048 (16 heads, n_layer scanned, seq_len 1024, vocab 50257, bf16 with fp32 master
# weights, micro_batch 1) that fits 16 GiB per rank on dp 8 x tp 2 x pp 1 for each combination,
# by `llmtrain --plan` (exit 0 = fits). Writes build/bench/memory.md.
# THREADS (default 1 per rank), STEPS (default 8), ROUNDS (default 2) can be set; ZEROS
# (default "0 1 2 3 3r", 3r = ZeRO-3 resident) and MODES (default "none selective full") choose
# a subset of part 1, PLAN=0 skips part 2, REPORT names the output (default build/bench/memory.md).
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${THREADS:=1}" "${STEPS:=8}"
: "${ROUNDS:=2}" "${ZEROS:=0 1 2 3 3r}" "${MODES:=none selective full}" "${PLAN:=1}"
: "${REPORT:=build/bench/memory.md}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/bench/memory
mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
for r in $(seq "$ROUNDS"); do
    for z in $ZEROS; do
        for mode in $MODES; do
            [ $z = 3r ] && [ $mode != none ] && continue
            resident=.false.
            [ $z = 3r ] && resident=.true.
            name=z${z}_${mode}_$r
            cat >$OUT/$name.nml <<NML
&run name = '$name', out_dir = '$OUT' /
&model n_layer = 8, n_head = 4, d_model = 256, vocab_size = 500, seq_len = 128 /
&parallel dp = 4, zero_stage = ${z%r}, zero3_resident = $resident, recompute = '$mode', schedule = '1f1b' /
&train max_steps = $STEPS, micro_batch = 2, global_batch = 16, lr = 1e-3, warmup_steps = 0 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = $STEPS, peak_flops = 1e10 /
NML
            echo "== round $r: zero_stage $z, recompute $mode"
            OMP_NUM_THREADS=$THREADS $MPIRUN -np 4 --bind-to none ./llmtrain $OUT/$name.nml >$OUT/$name.log 2>&1 ||
                { tail -20 $OUT/$name.log; echo "llmtrain failed"; exit 1; }
        done
    done
done

# Part 2: the largest n_layer that fits, per combination (binary search on --plan's exit code;
# llmtrain's own limit of 2^31 parameters per rank caps the search).
largest() { # zero recompute -> "n_layer GiB"
    local lo=0 hi=128 mid best=""
    while [ $((hi - lo)) -gt 1 ]; do
        mid=$(((lo + hi) / 2))
        cat >$OUT/plan.nml <<NML
&run name = 'plan', out_dir = '$OUT', memory_limit_gb = 16 /
&model n_layer = $mid, n_head = 16, d_model = 2048, vocab_size = 50257, seq_len = 1024 /
&parallel dp = 8, tp = 2, zero_stage = $1, recompute = '$2', schedule = '1f1b' /
&train micro_batch = 1, global_batch = 8, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
&log peak_flops = 1e12 /
NML
        if ./llmtrain --plan $OUT/plan.nml >$OUT/plan.out 2>&1; then
            lo=$mid best=$(sed -n 's/.*the fullest rank.*total \([0-9.]*\) MiB/\1/p' $OUT/plan.out)
        else
            hi=$mid
        fi
    done
    echo "$lo ${best:-0}"
}
: >$OUT/largest.txt
[ "$PLAN" = 1 ] && for z in 0 1 2 3; do
    for mode in none selective full; do
        echo "$z $mode $(largest $z $mode)" >>$OUT/largest.txt
    done
done

$PYTHON - "$OUT" "$ROUNDS" "$THREADS" "$ZEROS" "$MODES" <<'PY' | tee "$REPORT"
import json, os, re, statistics, sys
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
zeros, modes = sys.argv[4].split(), sys.argv[5].split()
cats = ["parameters", "gradients", "optimizer", "activations", "comm", "workspace"]
idx = {c: i for i, c in enumerate(["parameters", "gradients", "optimizer", "master", "activations", "comm", "workspace"])}
print(f"Measured: L=8 C=256 heads=4 T=128 vocab 500 (7.4M parameters), micro_batch 2 x accumulation 2 "
      f"on dp 4 x tp 1 x pp 1, 1F1B, fp32, {threads} thread per rank, {rounds} interleaved rounds; "
      "rank 0's measured peak per category (MiB) and the median step time over the steady steps.\n")
print("| zero | recompute | " + " | ".join(cats) + " | p+g+o | total peak | planned | dp MiB/step | median step ms | vs first row |")
print("|---|---|" + "---|" * (len(cats) + 6))
base = None
for z in zeros:
    for mode in modes:
        if z == "3r" and mode != "none": continue
        ms, row = [], None
        for r in range(1, rounds + 1):
            name = f"z{z}_{mode}_{r}"
            steps = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if '"loss"' in l]
            ms += [s["ms"] for s in steps[2:]]
            dpb = steps[-1]["bytes_dp"] / 2**20
            log = open(f"{out}/{name}.log").read()
            row = re.search(r"^  0 \(0,0,0\)\s+(.*)$", log, re.M).group(1).split()
        pairs = [tuple(map(float, p.split("/"))) for p in row[:8]]
        med = statistics.median(ms)
        base = base or med
        pgo = sum(pairs[i][0] for i in range(3))
        cells = " | ".join(f"{pairs[idx[c]][0]:.1f}" for c in cats)
        label = "3, resident" if z == "3r" else z
        print(f"| {label} | {mode} | {cells} | {pgo:.1f} | {pairs[7][0]:.1f} | {pairs[7][1]:.1f} | {dpb:.1f} | {med:.0f} | {med / base:.2f} |")
if os.path.getsize(f"{out}/largest.txt") == 0: sys.exit(0)
print("\nPlanned: the largest model of d_model 2048 (16 heads, seq_len 1024, vocab 50257, bf16 weights and "
      "activations, fp32 master and AdamW) with micro_batch 1 that fits 16 GiB per rank on dp 8 x tp 2 x pp 1 "
      "(`llmtrain --plan`, memory_limit_gb = 16). n_layer 127 is the search's ceiling.\n")
print("| zero | recompute | largest n_layer | parameters | planned GiB per rank |")
print("|---|---|---|---|---|")
for line in open(f"{out}/largest.txt"):
    z, mode, L, mib = line.split()
    L = int(L)
    C, V, T = 2048, 50304, 1024
    params = L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C
    print(f"| {z} | {mode} | {L} | {params / 1e9:.2f} B | {float(mib) / 1024:.2f} |")
PY
