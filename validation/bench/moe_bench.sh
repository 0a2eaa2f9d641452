#!/usr/bin/env bash
# moe_bench.sh — what Mixture-of-Experts costs and buys (not a test). One model shape: L=4, C=128,
# 4 heads, T=64, vocab 500 (data/tiny), micro_batch 4, global batch 32, fp32, 1 thread per rank.
#  1. Step time, dense vs MoE of equal active parameters per token: dense d_ff = 512 against
#     4 experts of width 256 with top_k = 2 (2 x 256 active per token; capacity_factor 1.25,
#     aux 0.01, z 0.001: the defaults), both on dp 4 (the MoE with ep 4), ROUNDS interleaved
#     rounds of STEPS steps so machine load hits both alike: median step ms over the steps after
#     the first 2 of every round, and the experts' all-to-all per step (metrics ms_ep, bytes_ep
#     of rank 0: rows sent, the rank's own included, plus the count exchange).
#  2. Memory per rank vs ep (1, 2, 4 on dp 4, same MoE model): rank 0's measured peak per category
#     (the end-of-run table) beside the analytic parameter count per rank (dense tensors + E/ep
#     experts), and the largest rss of metrics.jsonl.
#  3. Load balance over training with and without the aux loss: 1 rank, the same shape with
#     top_k = 1, dropless (capacity_factor 0: the load is the router's choice), z-loss 0, global batch 16, from
#     step-0 weights edited so that every router favours expert 0 by 4 in its logits
#     (validation/moe_favour_expert.py), BALANCE_STEPS steps at lr 3e-3, aux_loss_coef in AUX_COEFS;
#     mean moe<L>_cv over the last 10 steps, and a PNG of cv and loss per step
#     (validation/bench/moe_balance_plot.py).
# Writes build/bench/moe.md and build/bench/moe/moe_balance.png. Settings (environment): STEPS (10),
# ROUNDS (2), BALANCE_STEPS (40), AUX_COEFS ("0 0.01 0.1"), THREADS (1 per rank; part 3: 2).
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${STEPS:=10}" "${ROUNDS:=2}"
: "${BALANCE_STEPS:=40}" "${AUX_COEFS:=0 0.01 0.1}" "${THREADS:=1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/bench/moe
rm -rf $OUT && mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
fail() { echo "moe_bench: $*"; exit 1; }
MOE="n_experts = 4, top_k = 2, d_ff_expert = 256"

# write_nml NAME DP EP MODEL_KEYS STEPS [GLOBAL_BATCH [TRAIN_KEYS [INIT_FROM]]]
write_nml() {
    cat >$OUT/$1.nml <<NML
&run name = '$1', out_dir = '$OUT', init_from = '${8:-}' /
&model n_layer = 4, n_head = 4, d_model = 128, vocab_size = 500, seq_len = 64, $4 /
&parallel dp = $2, ep = $3 /
&train max_steps = $5, micro_batch = 4, global_batch = ${6:-32}, warmup_steps = 0, ${7:-lr = 1e-3} /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = 1 /
NML
}
# run NAME NP [THREADS]
run() {
    echo "== $1 ($2 ranks)"
    OMP_NUM_THREADS=${3:-$THREADS} $MPIRUN -np $2 --bind-to none ./llmtrain $OUT/$1.nml >$OUT/$1.log 2>&1 ||
        { tail -20 $OUT/$1.log; fail "llmtrain failed ($OUT/$1.log)"; }
    grep -E "^step" $OUT/$1.log | tail -1
}

# 1. dense vs MoE, interleaved rounds
for r in $(seq "$ROUNDS"); do
    write_nml dense_$r 4 1 "d_ff = 512" $STEPS
    run dense_$r 4
    write_nml moe_ep4_$r 4 4 "$MOE" $STEPS
    run moe_ep4_$r 4
done
# 2. the same MoE model on ep 1 and 2 (ep 4: part 1)
for ep in 1 2; do
    write_nml moe_ep${ep}_1 4 $ep "$MOE" $STEPS
    run moe_ep${ep}_1 4
done
# 3. balance: favoured start, aux on/off
BAL="n_experts = 4, top_k = 1, d_ff_expert = 256, capacity_factor = 0, z_loss_coef = 0"
write_nml bal_init 1 1 "$BAL" 1
sed -i 's/save_weights = .false./save_weights = .true./' $OUT/bal_init.nml
run bal_init 1 2
$PYTHON validation/moe_favour_expert.py $OUT/bal_init/weights_step000000.h5 $OUT/favoured.h5 \
    --offset 4 --router-scale 10 --bias 0.5 || fail "editing the weights failed"
PLOT_RUNS=()
for aux in $AUX_COEFS; do
    write_nml bal_aux$aux 1 1 "$BAL, aux_loss_coef = $aux" $BALANCE_STEPS 16 \
        "lr = 3e-3, lr_schedule = 'constant'" $OUT/favoured.h5
    run bal_aux$aux 1 2
    PLOT_RUNS+=("aux_loss_coef $aux=$OUT/bal_aux$aux")
done
$PYTHON validation/bench/moe_balance_plot.py $OUT/moe_balance.png "${PLOT_RUNS[@]}" \
    --title "L=4 C=128, 4 experts top-1 dropless, router favouring expert 0 at step 0; lr 3e-3" ||
    fail "the plot failed"

$PYTHON - "$OUT" "$ROUNDS" "$THREADS" "$AUX_COEFS" <<'PY' | tee build/bench/moe.md
import json, os, re, statistics, sys
out, rounds, threads, auxes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()

def steps(name):
    return [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if '"loss"' in l]

def mem_rows(name):
    """rank -> measured MiB per category, from the end-of-run memory table"""
    rows = {}
    for m in re.finditer(r"^\s+(\d+) \(\d+,\d+,\d+\)\s+(.*)$", open(f"{out}/{name}.log").read(), re.M):
        cells = m.group(2).split()
        rows[int(m.group(1))] = [float(c.split("/")[0]) for c in cells[:8]] + [float(cells[8])]
    return rows

C, T, Vp, L, E, Fe, dff = 128, 64, 512, 4, 4, 256, 512
dense_common = Vp * C + T * C + 2 * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C)
mlp = lambda f: f * C + f + C * f + C  # fc.w, fc.b, proj.w, proj.b
def params_per_rank(ep):  # dense tensors (and routers) + this rank's E/ep experts
    return dense_common + L * (E * C + (E // ep) * mlp(Fe))

print(f"Measured on {os.cpu_count()} cores ({open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}), "
      f"load average {open('/proc/loadavg').read().split()[0]}; model L=4 C=128 heads=4 T=64 vocab 500, "
      f"micro_batch 4, global batch 32, fp32, 4 ranks x {threads} thread (oversubscribed when the "
      "machine has fewer cores: step times are noisy, compare the ratio).\n")
print(f"**1. Dense vs MoE of equal active parameters per token** (median over the steps after the first 2 "
      f"of each of {rounds} interleaved rounds):\n")
print("| model | parameters | active per token | median step ms | ratio to dense | median ms_ep | bytes_ep / step | moe_dropped |")
print("|---|---|---|---|---|---|---|---|")
res = {}
for kind in ("dense", "moe_ep4"):
    rs = [s for r in range(1, rounds + 1) for s in steps(f"{kind}_{r}")[2:]]
    res[kind] = (statistics.median(s["ms"] for s in rs),
                 statistics.median(s.get("ms_ep", 0) for s in rs),
                 statistics.median(s.get("bytes_ep", 0) for s in rs),
                 statistics.mean(s.get("moe_dropped", 0) for s in rs))
total_dense = dense_common + L * mlp(dff)
total_moe = params_per_rank(1)
for kind, label, tot, act in (("dense", "dense, d_ff 512, dp 4", total_dense, total_dense),
                              ("moe_ep4", "MoE 4 x 256, top-2, dp 4 ep 4", total_moe, dense_common + L * (E * C + 2 * mlp(Fe)))):
    ms, ms_ep, b_ep, drop = res[kind]
    print(f"| {label} | {tot / 1e6:.2f} M | {act / 1e6:.2f} M | {ms:.0f} | {ms / res['dense'][0]:.2f} | "
          f"{ms_ep:.0f} | {b_ep / 2**20:.2f} MiB | {100 * drop:.1f}% |")
print("\n(active per token: all dense tensors + the router and 2 of the 4 experts per block; the MoE's "
      "extra 2.5 k are the routers and a second output bias per block.)\n")

print("**2. Memory per rank vs ep** (dp 4; rank 0's measured peak per category, MiB, from the end-of-run "
      "table; expected parameters = the dense tensors and routers + E/ep experts, 4 bytes each):\n")
print("| ep | experts per rank | expected parameters per rank | parameters | gradients | optimizer | p+g+o | activations | total peak | max rss (metrics) | median step ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for ep in (1, 2, 4):
    name = f"moe_ep{ep}_1"
    m = mem_rows(name)[0]
    st = steps(name)
    pr = params_per_rank(ep)
    print(f"| {ep} | {E // ep} | {pr / 1e6:.3f} M = {4 * pr / 2**20:.2f} MiB | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | "
          f"{m[0] + m[1] + m[2]:.1f} | {m[4]:.1f} | {m[7]:.1f} | {max(s['rss_mib'] for s in st):.1f} | "
          f"{statistics.median(s['ms'] for s in st[2:]):.0f} |")

print("\n**3. Load balance with and without the aux loss** (1 rank, 2 threads; top-1, dropless, z-loss 0, global batch 16; every "
      "router favours expert 0 by 4 in its logits at step 0; lr 3e-3; cv = std/mean of the expert load, "
      "0 = balanced, 1.73 = one expert; mean over the 4 MoE blocks):\n")
print("| aux_loss_coef | cv step 1 | cv, mean of the last 10 steps | per block | loss, last step |")
print("|---|---|---|---|---|")
for aux in auxes:
    st = steps(f"bal_aux{aux}")
    layers = sorted(int(k[3:-3]) for k in st[0] if k.startswith("moe") and k.endswith("_cv"))
    cv = lambda r: statistics.mean(r[f"moe{l}_cv"] for l in layers)
    per = [statistics.mean(r[f"moe{l}_cv"] for r in st[-10:]) for l in layers]
    print(f"| {aux} | {cv(st[0]):.2f} | {statistics.mean(cv(r) for r in st[-10:]):.2f} | "
          f"{' / '.join('%.2f' % p for p in per)} | {st[-1]['loss']:.3f} |")
print(f"\nPlot: {out}/moe_balance.png")
PY
