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
# bit for bit. sp with tp = 1, and seq_len not divisible by tp, are refused (exit 2, one message).
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
case_run l_tp4sp llama 4 l_serial parallel.tp=4 $SP
case_run l_pp2sp llama 4 l_serial parallel.tp=2 parallel.pp=2 $SP
case_run l_zbh1sp llama 4 l_serial parallel.tp=2 parallel.pp=2 parallel.schedule=zb-h1 \
    parallel.recompute=full $SP
case_run l_zero2sp llama 4 l_serial parallel.dp=2 parallel.tp=2 parallel.zero_stage=2 $SP
case_run l_zero3sp llama 4 l_serial parallel.dp=2 parallel.tp=2 parallel.zero_stage=3 $SP

echo "== GPT-2 with dropout 0.1 (masks keyed by global token): 1 rank, tp 2, tp 2 + sp, pp 2 + sp"
case_run g_serial gpt2 1 -
case_run g_tp2 gpt2 2 g_serial parallel.tp=2
case_run g_tp2sp gpt2 2 g_serial parallel.tp=2 $SP
case_run g_pp2sp gpt2 4 g_serial parallel.tp=2 parallel.pp=2 $SP

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
diff <(grep '"step":[456],' "$TEST_DIR/l_tp2sp/metrics.jsonl" | grep -o '"loss":[^,]*,"[a-z_]*":[^,]*') \
    <(grep '"step":[456],' "$TEST_DIR/l_resumed/metrics.jsonl" | grep -o '"loss":[^,]*,"[a-z_]*":[^,]*') ||
    fail "resumed sp run differs from the uninterrupted one"
[ "$(grep -c '"step":[456],' "$TEST_DIR/l_resumed/metrics.jsonl")" -eq 3 ] || fail "resumed: not 3 steps"
echo "ok  resumed: steps 4-6 identical"

echo "== bad input"
nml bad1 llama
sed -i "s/&parallel dp = 1, tp = 1, pp = 1/&parallel dp = 1, tp = 1, pp = 1, sequence_parallel = .true./" "$TEST_DIR/bad1.nml"
check_case sp_tp1 "sequence_parallel" "$TEST_DIR/bad1.nml" 1
nml bad2 llama
sed -i "s/seq_len = 16/seq_len = 18/; s/tp = 1, pp = 1/tp = 4, pp = 1, sequence_parallel = .true./" "$TEST_DIR/bad2.nml"
check_case sp_seq_len "seq_len" "$TEST_DIR/bad2.nml" 4
echo "PASS"
