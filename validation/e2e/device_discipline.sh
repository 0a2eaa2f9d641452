#!/usr/bin/env bash
# The trainer keeps to what a GPU needs, checked without a GPU: with LLMT_DEVSIM=1 the CPU backend
# sits behind a simulated device (src/kernels/cpu/ops_devsim.c: its memory is closed to the host
# outside ops, every tensor an op gets must be device memory) and every data-path group carries
# its floats through the staged transport (src/parallel/comm_staged.c), as a CUDA run's groups do
# through NCCL. Host code that touches a tensor directly, hands an op a host buffer or sends device
# memory by MPI ends the run (exit 70, the address and the call stack). Each configuration runs
# with and without it: the step records (loss, lr, grad norm, val loss) and the final weights must
# be bit-identical, and the staged transport must have carried the transfers (all completed).
# Found on the way: MoE's backward moved the experts' input gradients with a host memmove.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash" # MOE_KEYS
write_tiny_nml "$TEST_DIR/t.nml" name=r max_steps=4 mb=2 gb=8 val_every=2
echo "&checkpoint every = 2 /" >>"$TEST_DIR/t.nml"
# check NAME NP [overrides]: the run without and with the simulated device
check() {
    local name=$1 np=$2 d
    shift 2
    for d in plain sim; do
        LLMT_DEVSIM=$([ $d = sim ] && echo 1 || echo 0) timeout 300 $MPIRUN -np "$np" ./llmtrain \
            "$TEST_DIR/t.nml" run.out_dir="'$TEST_DIR/$name-$d'" "$@" >"$TEST_DIR/$name-$d.log" 2>&1 ||
            { grep -A14 'devsim\|error' "$TEST_DIR/$name-$d.log" | head -30; fail "$name ($d) exited non-zero"; }
    done
    grep -q '^compute: cpu-devsim backend' "$TEST_DIR/$name-sim.log" || fail "$name: the simulated device was not used"
    local a b
    a=$(train_records "$TEST_DIR/$name-plain/r/metrics.jsonl") b=$(train_records "$TEST_DIR/$name-sim/r/metrics.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "$name: step records differ"; }
    same_weights "$TEST_DIR/$name-plain/r/weights_step000004.h5" "$TEST_DIR/$name-sim/r/weights_step000004.h5" ||
        fail "$name: final weights differ"
    # every rank's staged transfers completed; with more than one rank some were staged
    local staged
    staged=$(grep -h '^devsim: rank' "$TEST_DIR/$name-sim.log" | awk '$4 != $7 {bad = 1} {s += $4} END {print bad ? -1 : s}')
    [ "$staged" -ge 0 ] || fail "$name: staged transfers left incomplete"
    if [ "$np" -gt 1 ] && [ "$staged" -eq 0 ]; then fail "$name: nothing went through the staged transport"; fi
    printf '%-10s %d rank(s): %2d records bit-identical, final weights identical, %6d transfers staged\n' \
        "$name" "$np" "$(echo "$a" | wc -l)" "$staged"
}
check serial 1
check dp2_zero3 2 parallel.dp=2 parallel.zero_stage=3
check dp2tp2 4 parallel.dp=2 parallel.tp=2 parallel.zero_stage=1
check pp2_1f1b 2 parallel.pp=2
check pp2_zbh1 2 parallel.pp=2 parallel.schedule="'zb-h1'"
check moe_ep2 2 parallel.dp=2 parallel.ep=2 parallel.zero_stage=2 "${MOE_KEYS[@]}"
check llama_tp2 2 model.arch="'llama'" model.n_kv_head=2 parallel.tp=2
check reg_fp16 2 parallel.dp=2 train.precision="'fp16'" model.dropout=0.1 train.label_smoothing=0.1 \
    train.z_loss=1e-4 parallel.recompute="'full'"
# a resumed run (the checkpoint read through to_device) and generation on tp = 2
cp -r "$TEST_DIR/dp2_zero3-plain" "$TEST_DIR/resume-plain" && cp -r "$TEST_DIR/dp2_zero3-plain" "$TEST_DIR/resume-sim"
for d in plain sim; do
    rm -f "$TEST_DIR/resume-$d/r/weights_step000004.h5"
    LLMT_DEVSIM=$([ $d = sim ] && echo 1 || echo 0) timeout 300 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/t.nml" \
        run.out_dir="'$TEST_DIR/resume-$d'" parallel.dp=2 parallel.zero_stage=3 train.max_steps=6 \
        checkpoint.resume="'auto'" >"$TEST_DIR/resume-$d.log" 2>&1 || { tail -20 "$TEST_DIR/resume-$d.log"; fail "resume ($d)"; }
    LLMT_DEVSIM=$([ $d = sim ] && echo 1 || echo 0) timeout 300 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/t.nml" \
        run.mode="'generate'" run.init_from="'$TEST_DIR/serial-plain/r/weights_step000004.h5'" \
        run.prompt_ids=1,2,3,4 run.max_new_tokens=8 run.temperature=0 parallel.tp=2 \
        run.out_dir="'$TEST_DIR/gen-$d'" >"$TEST_DIR/gen-$d.log" 2>&1 || { tail -20 "$TEST_DIR/gen-$d.log"; fail "generate ($d)"; }
done
[ "$(train_records "$TEST_DIR/resume-plain/r/metrics.jsonl")" = "$(train_records "$TEST_DIR/resume-sim/r/metrics.jsonl")" ] ||
    fail "resumed run: step records differ"
a=$(grep '^generate: continuation' "$TEST_DIR/gen-plain.log") b=$(grep '^generate: continuation' "$TEST_DIR/gen-sim.log")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "generation differs: '$a' vs '$b'"
echo "resume (ZeRO-3, dp 2) and generation (tp 2): identical with the simulated device ($a)"
