#!/usr/bin/env bash
# A tiny Llama (4 layers, d_model 32, 4 heads, 2 kv heads, RoPE, RMSNorm, SwiGLU, untied head,
# no biases) trains the same on dp/tp/pp grids of up to 4 ranks as on one process: same seed and
# global batch (8 sequences, micro-batch 1), 10 steps, losses and gradient norms (before
# clipping) within 1e-5 relative, final weights within 1e-4 absolute. tp 2 splits the 2 kv heads,
# tp 4 replicates them; pp puts the untied head on the last stage; one grid with ZeRO-1 and
# selective recomputation. Then a checkpoint written on tp 2 x pp 2 resumes on one process with
# the losses of the uninterrupted run.
source "$(dirname "$0")/lib.bash"
grid_nml() { # name dp tp pp [extra &parallel keys]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model arch = 'llama', n_layer = 4, n_head = 4, n_kv_head = 2, d_model = 32, d_ff = 96,
       vocab_size = 500, seq_len = 16 /
&parallel dp = $2, tp = $3, pp = $4 ${5:-} /
&train max_steps = 10, micro_batch = 1, global_batch = 8, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 5 /
&log every = 10 /
NML
}
run_grid() { # name np [overrides]
    local n=$1 np=$2; shift 2
    timeout 300 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/$n.nml" "$@" >"$TEST_DIR/$n.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$n.log"; fail "$n exited non-zero"; }
}
compare() { # reference name
    same_series "$2: losses" 1e-5 <(losses "$TEST_DIR/$1/metrics.jsonl") <(losses "$TEST_DIR/$2/metrics.jsonl") ||
        fail "$2: losses differ from $1 by more than 1e-5 relative"
    same_series "$2: norms" 1e-5 <(norms "$TEST_DIR/$1/metrics.jsonl") <(norms "$TEST_DIR/$2/metrics.jsonl") ||
        fail "$2: gradient norms differ from $1 by more than 1e-5 relative"
    $PYTHON validation/compare_weights.py --atol 1e-4 "$TEST_DIR/$1/weights_step000010.h5" \
        "$TEST_DIR/$2/weights_step000010.h5" >"$TEST_DIR/$2.weights" ||
        { cat "$TEST_DIR/$2.weights"; fail "$2: final weights differ by more than 1e-4"; }
}
grid_nml serial 1 1 1
run_grid serial 1
[ "$(losses "$TEST_DIR/serial/metrics.jsonl" | wc -l)" -eq 10 ] || fail "serial: not 10 steps"
for g in 2,1,1 1,2,1 1,1,2 1,4,1 2,2,1 1,2,2 2,1,2 1,1,4; do
    IFS=, read -r dp tp pp <<<"$g"
    name=dp${dp}tp${tp}pp${pp}
    grid_nml $name $dp $tp $pp
    run_grid $name $((dp * tp * pp))
    compare serial $name
done
grid_nml zero1 2 2 1 ", zero_stage = 1, recompute = 'selective'"
run_grid zero1 4
compare serial zero1

echo "== resume the tp 2 x pp 2 run's step-5 checkpoint on one process"
grid_nml resumed 1 1 1
mkdir -p "$TEST_DIR/resumed"
run_grid resumed 1 "checkpoint.resume=$TEST_DIR/dp1tp2pp2/ckpt_step00000005.h5"
same_series "resumed: losses of steps 6-10" 1e-5 <(losses "$TEST_DIR/serial/metrics.jsonl" | tail -5) \
    <(losses "$TEST_DIR/resumed/metrics.jsonl" | tail -5) || fail "resumed run's losses differ"
echo "PASS"
