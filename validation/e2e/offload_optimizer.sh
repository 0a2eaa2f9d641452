#!/usr/bin/env bash
# &train offload = 'optimizer' (src/train/optimizer.c): AdamW's moments and the fp32 master weights
# in host memory, the update on the CPU (overlapped with the next forward on a thread of its own
# without ZeRO, in place of the step with ZeRO). The update is the CPU backend's, in the same
# order, so every run must equal the same run without offload bit for bit: the step records
# (loss, lr, grad norm, val loss) and the final weights, on 1 rank, dp 2 (overlapped), ZeRO-1 and
# ZeRO-3 (not overlapped), pp 2, interleaved, tp 2, bf16 and fp16 (master weights and loss
# scaling), MoE on ep 2, a rollback to a checkpoint and a resume (the host state written and read
# back). Under LLMT_DEVSIM=1 (device_discipline.sh) the offloaded runs equal the plain ones too:
# the host state is outside the simulated device and reaches it only through to_host /
# to_device. Each forward after an update reports its waits: every unit (n_layer + 2 = 4) comes by
# once per step. With schedule = 'zb-h1' offload is refused (exit 2, naming both keys).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash" # MOE_KEYS
write_tiny_nml "$TEST_DIR/t.nml" name=r max_steps=6 mb=2 gb=8 val_every=3
echo "&checkpoint every = 3 /" >>"$TEST_DIR/t.nml"
run() { # DIR NP DEVSIM overrides...: exit code in rc
    local dir=$1 np=$2 sim=$3
    shift 3
    LLMT_DEVSIM=$sim timeout 300 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/t.nml" run.out_dir="'$TEST_DIR/$dir'" "$@" \
        >"$TEST_DIR/$dir.log" 2>&1
    rc=$?
}
# check NAME NP DEVSIM [overrides]: without offload, then with it
check() {
    local name=$1 np=$2 sim=$3
    shift 3
    run "$name-none" "$np" 0 "$@"
    [ $rc -eq 0 ] || { tail -20 "$TEST_DIR/$name-none.log"; fail "$name without offload: exit $rc"; }
    run "$name-off" "$np" "$sim" train.offload="'optimizer'" "$@"
    [ $rc -eq 0 ] || { grep -A12 'error\|devsim: host' "$TEST_DIR/$name-off.log" | head -20; fail "$name with offload: exit $rc"; }
    grep -q "^optimizer: offload = 'optimizer'" "$TEST_DIR/$name-off.log" || fail "$name: no startup line for the offload"
    local a b
    a=$(train_records "$TEST_DIR/$name-none/r/metrics.jsonl") b=$(train_records "$TEST_DIR/$name-off/r/metrics.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "$name: step records differ"; }
    same_weights "$TEST_DIR/$name-none/r/weights_step000006.h5" "$TEST_DIR/$name-off/r/weights_step000006.h5" ||
        fail "$name: final weights differ"
    local waits
    waits=$(grep -o '"step":[2-6],.*"offload_units":[0-9]*' "$TEST_DIR/$name-off/r/metrics.jsonl" | grep -o '"offload_units":[0-9]*' | sort -u | tr '\n' ' ')
    printf '%-10s %d rank(s)%s: %2d records bit-identical, final weights identical; forwards: %s\n' "$name" "$np" \
        "$([ "$sim" = 1 ] && echo ', simulated device')" "$(echo "$a" | wc -l)" "${waits:-none}"
    echo "$waits" >"$TEST_DIR/$name.waits"
}
check serial 1 0
# overlapped (ZeRO 0): each later step's forward met every unit once (val forwards come first)
w=$(cat "$TEST_DIR/serial.waits")
[ "$w" = '"offload_units":4 ' ] || fail "serial: the forwards met '$w' units per step, expected 4"
check dp2 2 0 parallel.dp=2
check zero1 2 0 parallel.dp=2 parallel.zero_stage=1
check zero3 2 0 parallel.dp=2 parallel.zero_stage=3
check pp2 2 0 parallel.pp=2
check interleaved 2 0 parallel.pp=2 parallel.schedule="'interleaved'" parallel.virtual_stages=2 model.n_layer=4
check tp2 2 0 parallel.tp=2
check bf16 1 0 train.precision="'bf16'"
check fp16_dp2 2 0 parallel.dp=2 train.precision="'fp16'"
check moe_ep2 2 0 parallel.dp=2 parallel.ep=2 "${MOE_KEYS[@]}"
check sim_dp2 2 1 parallel.dp=2
check sim_zero2 2 1 parallel.dp=2 parallel.zero_stage=2
check sim_pp2 2 1 parallel.pp=2 train.precision="'bf16'"
# a rollback (the spike at step 5 goes back to the checkpoint of step 3: the host state is read
# back while an overlapped update may be in flight)
check rollback 1 0 train.on_anomaly="'rollback'" train.inject_spike_step=5 train.anomaly_window=2
grep -q '"action":"rollback"' "$TEST_DIR/rollback-off/r/metrics.jsonl" || fail "rollback: no rollback happened"
# a resume from the step-3 checkpoint with offload equals the uninterrupted offloaded run
mkdir -p "$TEST_DIR/resume/r" && cp "$TEST_DIR/dp2-off/r/ckpt_step00000003.h5" "$TEST_DIR/resume/r/"
run resume 2 0 train.offload="'optimizer'" parallel.dp=2 checkpoint.resume="'$TEST_DIR/resume/r/ckpt_step00000003.h5'" \
    run.name="'r2'"
[ $rc -eq 0 ] || { tail -20 "$TEST_DIR/resume.log"; fail "resume with offload: exit $rc"; }
a=$(train_records "$TEST_DIR/dp2-off/r/metrics.jsonl" | grep -A99 '"step":4,' | grep '"step"')
b=$(train_records "$TEST_DIR/resume/r2/metrics.jsonl" | grep '"step"')
[ -n "$b" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b"); fail "resumed offloaded run: steps 4..6 differ"; }
echo "resume   2 ranks: steps 4..6 from the step-3 checkpoint equal the uninterrupted offloaded run"
# refused with ZB-H1 (its post-validation keeps device copies of the state)
run zbh1 2 0 train.offload="'optimizer'" parallel.pp=2 parallel.schedule="'zb-h1'"
[ $rc -eq 2 ] || fail "offload with zb-h1: exit $rc, expected 2"
grep -q "offload = 'optimizer' cannot be used with &parallel schedule = 'zb-h1'" "$TEST_DIR/zbh1.log" ||
    fail "offload with zb-h1: not the expected message: $(grep error "$TEST_DIR/zbh1.log")"
echo "offload with schedule = 'zb-h1': refused, exit 2"
