#!/usr/bin/env bash
# Sequence parallelism (&parallel sequence_parallel, docs/parallelism.md): a tiny Llama (2 layers,
# d_model 32, 4 heads, 2 kv heads: GQA, RoPE, RMSNorm, SwiGLU, untied head) and a tiny GPT-2
# with dropout 0.1 train for 6 steps (micro-batch 2, global batch 4, seq_len 16) with the same
# losses and gradient norms (before clipping) as the one-process run and the tp run without sp,
# within 1e-5 relative (fp32; the reduce-scatter sums in another order than the all-reduce), and
# final weights within 1e-4 absolute: tp 2 and tp 4, tp 2 x pp 2 with 1F1B and with ZB-H1 and full
# recomputation, dp 2 x tp 2 with ZeRO-2 and ZeRO-3; bf16 with 16-bit activation storage and
# selective recomputation equal to the same run without sp (1e-5); an MoE model equal to its
# run without sp. An sp run's step-3 checkpoint resumed gives the uninterrupted run's step records
# bit for bit. tp 2 + sp on the simulated device (LLMT_DEVSIM=1: the collectives through the
# device transport's staged path) equals tp 2 without sp. Memory (4 layers, d_model 64, seq_len 64, micro-batch 4, tp 2): planned = measured
# per rank and category (0.1 MiB or 10%), activations lower with sp by at least 0.4 MiB (per block
# ln1, res2, ln2, res3 and the norm statistics halve). sp with tp = 1, and seq_len not divisible
# by tp, are refused (exit 2, one message naming the keys).
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name arch
    if [ "$2" = llama ]; then
        local model="arch = 'llama', n_layer = 2, n_head = 4, n_kv_head = 2, d_model = 32, d_ff = 96"
    else
        local model="n_layer = 2, n_head = 4, d_model = 32, dropout = 0.1"
    fi
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model $model, vocab_size = 500, seq_len = 16 /
&parallel dp = 1, tp = 1, pp = 1 /
&train max_steps = 6, micro_batch = 2, global_batch = 4, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 3 /
&log every = 6 /
NML
}
run() { # name np [overrides]
    local n=$1 np=$2; shift 2
    timeout 120 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/$n.nml" "$@" </dev/null >"$TEST_DIR/$n.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$n.log"; fail "$n exited non-zero"; }
}
compare() { # reference name [tolerance]
    local tol=${3:-1e-5}
    printf '%-14s ' "$2"
    same_series "losses vs $1" "$tol" <(losses "$TEST_DIR/$1/metrics.jsonl") \
        <(losses "$TEST_DIR/$2/metrics.jsonl") | tr '\n' ' ' ||
        fail "$2: losses differ from $1 by more than $tol relative"
    same_series "norms" "$tol" <(norms "$TEST_DIR/$1/metrics.jsonl") \
        <(norms "$TEST_DIR/$2/metrics.jsonl") | tr '\n' ' ' ||
        fail "$2: gradient norms differ from $1 by more than $tol relative"
    $PYTHON validation/compare_weights.py --atol 1e-4 "$TEST_DIR/$1/weights_step000006.h5" \
        "$TEST_DIR/$2/weights_step000006.h5" >"$TEST_DIR/$2.weights" ||
        { cat "$TEST_DIR/$2.weights"; fail "$2: final weights differ from $1 by more than 1e-4"; }
    echo "| weights ok"
}
case_run() { # name arch np reference [overrides]
    local n=$1 a=$2 np=$3 ref=$4; shift 4
    nml "$n" "$a"
    run "$n" "$np" "$@"
    [ "$(losses "$TEST_DIR/$n/metrics.jsonl" | wc -l)" -eq 6 ] || fail "$n: not 6 step records"
    [ "$ref" = - ] || compare "$ref" "$n"
}
SP=parallel.sequence_parallel=.true.

echo "== Llama: 1 rank, tp 2 without and with sp, tp 4, 1F1B and ZB-H1 on pp 2, ZeRO-2 and -3"
case_run l_serial llama 1 -
case_run l_tp2 llama 2 l_serial parallel.tp=2
case_run l_tp2sp llama 2 l_serial parallel.tp=2 $SP
compare l_tp2 l_tp2sp
./llmtrain --plan "$TEST_DIR/l_tp2sp.nml" parallel.tp=2 $SP | grep "sequence parallel on" || fail "--plan does not say sp is on"
LLMT_DEVSIM=1 case_run l_devsim llama 2 l_tp2 parallel.tp=2 $SP # collectives by the device transport
case_run l_tp4sp llama 4 l_serial parallel.tp=4 $SP
case_run l_pp2sp llama 4 l_serial parallel.tp=2 parallel.pp=2 $SP
case_run l_zbh1sp llama 4 l_serial parallel.tp=2 parallel.pp=2 parallel.schedule=zb-h1 \
    parallel.recompute=full $SP
case_run l_zero2sp llama 4 l_serial parallel.dp=2 parallel.tp=2 parallel.zero_stage=2 $SP
case_run l_zero3sp llama 4 l_serial parallel.dp=2 parallel.tp=2 parallel.zero_stage=3 $SP

echo "== GPT-2 with dropout 0.1 (masks keyed by global token): 1 rank, tp 2 + sp"
case_run g_serial gpt2 1 -
case_run g_tp2sp gpt2 2 g_serial parallel.tp=2 $SP

echo "== bf16, 16-bit activation storage, selective recomputation: sp against no sp"
BF="train.precision=bf16 train.activations_storage=16bit parallel.recompute=selective"
case_run b_tp2 llama 2 - parallel.tp=2 $BF
case_run b_tp2sp llama 2 b_tp2 parallel.tp=2 $BF $SP

echo "== MoE (4 experts, top 2, every block): sp against no sp"
MOE="model.n_experts=4 model.top_k=2"
case_run m_tp2 gpt2 2 - parallel.tp=2 $MOE
case_run m_tp2sp gpt2 2 m_tp2 parallel.tp=2 $MOE $SP

echo "== resume the tp 2 + sp run's step-3 checkpoint: steps 4-6 bit-identical"
nml l_resumed llama
run l_resumed 2 parallel.tp=2 $SP "checkpoint.resume=$TEST_DIR/l_tp2sp/ckpt_step00000003.h5"
steps456() { grep '"step":[456],"loss"' "$1" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*'; }
diff <(steps456 "$TEST_DIR/l_tp2sp/metrics.jsonl") <(steps456 "$TEST_DIR/l_resumed/metrics.jsonl") ||
    fail "resumed sp run differs from the uninterrupted one"
[ "$(steps456 "$TEST_DIR/l_resumed/metrics.jsonl" | wc -l)" -eq 3 ] || fail "resumed: not 3 steps"
echo "ok  resumed: steps 4-6 identical"

echo "== memory: planned = measured per rank and category, activations smaller with sp"
for v in off on; do
    nml mem_$v gpt2
    sed -i "s/n_layer = 2, n_head = 4, d_model = 32, dropout = 0.1/n_layer = 4, n_head = 4, d_model = 64/; s/seq_len = 16/seq_len = 64/" "$TEST_DIR/mem_$v.nml"
    run mem_$v 2 parallel.tp=2 train.max_steps=2 train.micro_batch=4 train.global_batch=4 \
        checkpoint.every=0 "parallel.sequence_parallel=.$( [ $v = on ] && echo true || echo false )."
done
$PYTHON - "$TEST_DIR" <<'PY' || fail "sp memory: planned != measured, or no drop (above)"
import re, sys
d = sys.argv[1]
cats = ["parameters", "gradients", "optimizer", "master", "activations", "comm", "workspace", "total"]
act, bad = {}, 0
for v in ("off", "on"):
    rows = re.findall(r"^  (\d+) \((\d+),(\d+),(\d+)\)\s+(.*)$", open(f"{d}/mem_{v}.log").read(), re.M)
    if len(rows) != 2: print(f"mem_{v}: no memory table of 2 ranks"); bad = 1; continue
    for r, *_, rest in rows:
        pairs = [tuple(map(float, p.split("/"))) for p in rest.split()[:8]]
        for name, (meas, plan) in zip(cats, pairs):
            if abs(plan - meas) > max(0.1, 0.1 * meas):
                print(f"mem_{v} rank {r} {name}: measured {meas} MiB, planned {plan} MiB"); bad = 1
        act[v] = pairs[4]
print("activations per rank (measured/planned MiB): sp off %s, sp on %s" % (act.get("off"), act.get("on")))
# per block and row: ln1, res2, ln2, res3 (4 C) and the norms' 4 statistics drop to 1/tp
if not bad and not act["on"][0] < act["off"][0] - 0.4:
    print("sp does not lower the activations by 0.4 MiB"); bad = 1
sys.exit(bad)
PY

echo "== bad input"
nml bad1 llama
sed -i "s/tp = 1, pp = 1/tp = 1, pp = 1, sequence_parallel = .true./" "$TEST_DIR/bad1.nml"
check_case sp_tp1 "&parallel sequence_parallel: .true. (line 3) needs tp > 1" "$TEST_DIR/bad1.nml" 1
nml bad2 llama
sed -i "s/seq_len = 16/seq_len = 18/; s/tp = 1, pp = 1/tp = 4, pp = 1, sequence_parallel = .true./" "$TEST_DIR/bad2.nml"
check_case sp_seq_len "&model seq_len: sequence_parallel (line 3) needs seq_len divisible by tp = 4" "$TEST_DIR/bad2.nml" 4
echo "PASS"
