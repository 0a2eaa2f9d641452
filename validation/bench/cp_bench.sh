#!/usr/bin/env bash
# cp_bench.sh — context parallelism at a long sequence (not a test). One model: GPT-2 shape L=2,
# C=128, 4 heads (head size 32), vocab 500 (data/tiny), seq_len T (4096), micro_batch 1, global
# batch 1, fp32, recompute 'none'. cp = 1, 2, 4 (dp = tp = pp = 1), ROUNDS interleaved rounds of
# STEPS steps so that machine load hits every cp alike; the machine's cores are shared out evenly
# (threads per rank = max(1, cores / cp); cp above the core count oversubscribes). Per cp:
#   - median step ms over the steps after the first of every round, and tokens/s from it;
#   - bytes_cp per step (metrics.jsonl of rank 0: what that rank sent around the ring) beside the
#     count of ring.c's messages, n_layer x micro-batches x (3 cp - 2) blocks of
#     B x T/cp x 2 x n_kv_head x head size floats (forward: cp - 1 K/V sends; backward: cp - 1
#     K/V and cp dK/dV sends), and ms_cp (rank 0's waits on the ring);
#   - rank 0's measured activations and total peak (the end-of-run memory table) and the
#     planner's activations for the same rank.
# Writes build/bench/cp.md. Settings (environment): T (4096), STEPS (4), ROUNDS (2), CPS ("1 2 4").
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${STEPS:=4}" "${ROUNDS:=2}"
: "${T:=4096}" "${CPS:=1 2 4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/bench/cp
rm -rf $OUT && mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
fail() { echo "cp_bench: $*"; exit 1; }
CORES=$(nproc)

cat >$OUT/cp.nml <<NML
&run name = 'cp', out_dir = '$OUT' /
&model n_layer = 2, n_head = 4, d_model = 128, vocab_size = 500, seq_len = $T /
&train max_steps = $STEPS, micro_batch = 1, global_batch = 1, warmup_steps = 0, lr = 1e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 0, save_weights = .false., overwrite = .true. /
NML
for r in $(seq "$ROUNDS"); do
    for cp in $CPS; do
        threads=$((CORES / cp > 0 ? CORES / cp : 1))
        name=cp${cp}_$r
        echo "cp_bench: round $r, cp $cp ($threads thread(s) per rank)"
        OMP_NUM_THREADS=$threads timeout 900 $MPIRUN -np "$cp" --bind-to none ./llmtrain $OUT/cp.nml \
            parallel.cp="$cp" run.name="'$name'" >$OUT/$name.log 2>&1 ||
            { tail -5 $OUT/$name.log; fail "$name failed (see $OUT/$name.log)"; }
    done
done
for cp in $CPS; do # the planner's activations of rank 0 for this grid
    ./llmtrain --plan $OUT/cp.nml parallel.cp="$cp" >$OUT/plan$cp.txt 2>&1 || fail "--plan cp $cp failed"
done

OUT=$OUT T=$T ROUNDS=$ROUNDS CPS="$CPS" CORES=$CORES $PYTHON - >build/bench/cp.md <<'PY' || fail "report failed"
import json, os, re, statistics
out, T, rounds, cores = os.environ["OUT"], int(os.environ["T"]), int(os.environ["ROUNDS"]), int(os.environ["CORES"])
cps = [int(c) for c in os.environ["CPS"].split()]
L, B, NH, hs = 2, 1, 4, 32

def steps(name):
    return [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if '"loss"' in l]

def rank0(name):  # rank 0's measured MiB per category, from the end-of-run memory table
    m = re.search(r"^\s+0 \(\d+,\d+,\d+\)\s+(.*)$", open(f"{out}/{name}.log").read(), re.M)
    return [float(c.split("/")[0]) for c in m.group(1).split()[:8]]

def planned_activations(cp):
    m = re.search(r"activations ([0-9.]+), comm", open(f"{out}/plan{cp}.txt").read())
    return float(m.group(1)) if m else float("nan")

print(f"Measured on {cores} cores, load average {open('/proc/loadavg').read().split()[0]}; GPT-2 shape "
      f"L={L} C=128 heads={NH} (head size {hs}), seq_len {T}, micro_batch {B}, global batch 1, fp32, no "
      f"recomputation; threads per rank = cores / cp (at least 1; above {cores} ranks the cores are "
      f"oversubscribed). Median over the steps after the first of each of {rounds} interleaved rounds.\n")
print("| cp | tokens per rank | median step ms | tokens/s | ratio to cp 1 | median ms_cp | bytes_cp / step "
      "(rank 0) | message count (analytic) | activations MiB, measured / planned | total peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
base = None
for cp in cps:
    rs = [s for r in range(1, rounds + 1) for s in steps(f"cp{cp}_{r}")[1:]]
    ms = statistics.median(s["ms"] for s in rs)
    base = base or ms
    got = statistics.median(s.get("bytes_cp", 0) for s in rs)
    want = L * 1 * (3 * cp - 2) * B * (T // cp) * 2 * NH * hs * 4 if cp > 1 else 0
    mem = rank0(f"cp{cp}_1")
    print(f"| {cp} | {T // cp} | {ms:.0f} | {T / (ms / 1e3):.0f} | {base / ms:.2f} | "
          f"{statistics.median(s.get('ms_cp', 0) for s in rs):.1f} | {got / 2**20:.3f} MiB | "
          f"{want / 2**20:.3f} MiB{'' if got == want else ' (DIFFERS)'} | {mem[4]:.1f} / "
          f"{planned_activations(cp):.1f} | {mem[7]:.1f} |")
print("\n(bytes_cp is what rank 0 sent around the ring per step; every rank sends the same. The "
      "attention work per rank falls by cp; the step also holds the token-local products on T/cp rows "
      "and the ring's waits.)")
PY
cat build/bench/cp.md
