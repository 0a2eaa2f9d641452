#!/usr/bin/env bash
# fp16 loss scaling (Megatron's DynamicGradScaler semantics), on the tiny model, 2 ranks (dp 2):
#  1. an overflow injected at step 6 (&train inject_overflow_step = 5: an Inf in a reduced
#     gradient) skips exactly step 6 (applied false, overflow true, AdamW's t one behind), and the
#     loss scale of every step follows the reference rule computed independently below
#     (initial 1024, window 4, hysteresis 2: one overflow does not back off yet, growth resets).
#  2. the same with hysteresis 1: the scale halves at the overflow.
#  3. a fixed loss_scale: the overflowing step is skipped, the scale stays.
#  4. an overflow with the scale already at min_loss_scale is an anomaly: on_anomaly = 'abort'
#     ends the run with exit 2 and a message naming min_loss_scale.
#  5. the scaler state survives a checkpoint: a run resumed at step 8 continues the scales and
#     losses of the uninterrupted run bit for bit.
source "$(dirname "$0")/lib.bash"
nml() { # name extra_train [max_steps] [resume]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 3 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 2 /
&train max_steps = ${3:-14}, micro_batch = 2, global_batch = 8, lr = 3e-3, warmup_steps = 2
       precision = 'fp16', $2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 4, resume = '${4:-none}' /
&log every = 1 /
NML
}
run() { timeout 120 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1; }
# check_scales NAME initial window hysteresis min fixed: the per-step scales and skips of NAME's
# metrics against Megatron's update rule, fed with the steps that overflowed
check_scales() {
    $PYTHON - "$TEST_DIR/$1/metrics.jsonl" "${@:2}" <<'PY'
import json, sys
path, init, window, hyst, floor, fixed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "fixed"
steps = [json.loads(l) for l in open(path) if '"loss"' in l]
scale, growth, ht, ok = init, 0, hyst, True
for s in steps:
    if abs(s["loss_scale"] - scale) > 0 or s["applied"] == s["overflow"]:
        ok = False
    print("  step %2d: scale %8g (reference %8g) overflow %-5s applied %s" % (s["step"], s["loss_scale"], scale, s["overflow"], s["applied"]))
    if fixed:
        continue
    if s["overflow"]:                    # megatron DynamicGradScaler.update(found_inf=True)
        growth, ht = 0, ht - 1
        if ht <= 0:
            scale = max(scale / 2, floor)
    else:
        growth += 1
        if growth == window:
            growth, ht, scale = 0, hyst, scale * 2
print("overflowing steps:", [s["step"] for s in steps if s["overflow"]])
sys.exit(0 if ok else 1)
PY
}

echo "== 1. one overflow, hysteresis 2"
nml h2 "initial_loss_scale = 1024, loss_scale_window = 4, hysteresis = 2, inject_overflow_step = 5"
run h2 || { tail "$TEST_DIR/h2.log"; fail "h2 failed"; }
check_scales h2 1024 4 2 1 dynamic || fail "h2: the scale sequence differs from the reference rule"
[ "$(grep -c '"overflow":true' "$TEST_DIR/h2/metrics.jsonl")" -eq 1 ] || fail "h2: not exactly one overflowing step"
grep -q '"step":6,.*"applied":false.*"overflow":true' "$TEST_DIR/h2/metrics.jsonl" || fail "h2: step 6 was not the skipped one"
$PYTHON -c "import h5py,sys; f=h5py.File(sys.argv[1]); assert f.attrs['adam_t'] == 11, f.attrs['adam_t']" \
    "$TEST_DIR/h2/ckpt_step00000012.h5" || fail "h2: AdamW took other than 11 updates in 12 steps"

echo "== 2. one overflow, hysteresis 1: the scale halves"
nml h1 "initial_loss_scale = 1024, loss_scale_window = 4, hysteresis = 1, inject_overflow_step = 5"
run h1 || fail "h1 failed"
check_scales h1 1024 4 1 1 dynamic || fail "h1: the scale sequence differs from the reference rule"
grep -q '"step":7,.*"loss_scale":1024,' "$TEST_DIR/h1/metrics.jsonl" || fail "h1: step 7 does not run at the halved scale 1024"

echo "== 3. a fixed loss scale"
nml fixed "loss_scale = 128, inject_overflow_step = 5"
run fixed || fail "fixed failed"
check_scales fixed 128 1 1 128 fixed || fail "fixed: the scale moved or the skip is wrong"

echo "== 4. an overflow at the smallest scale is an anomaly"
nml floor "initial_loss_scale = 4, min_loss_scale = 4, inject_overflow_step = 2" && sed -i "s/precision = 'fp16', /precision = 'fp16', on_anomaly = 'abort', /" "$TEST_DIR/floor.nml"
run floor
rc=$?
[ $rc -eq 2 ] || { tail "$TEST_DIR/floor.log"; fail "floor: exit code $rc, expected 2"; }
grep "at the smallest loss scale (&train min_loss_scale).*on_anomaly = 'abort'" "$TEST_DIR/floor.log" || fail "floor: no message naming min_loss_scale"

echo "== 5. the scaler continues after a resume"
nml whole "initial_loss_scale = 1024, loss_scale_window = 3, hysteresis = 2, inject_overflow_step = 5"
run whole || fail "whole failed"
nml part "initial_loss_scale = 1024, loss_scale_window = 3, hysteresis = 2, inject_overflow_step = 5" 14 auto
mkdir -p "$TEST_DIR/part" && cp "$TEST_DIR/whole/ckpt_step00000008.h5" "$TEST_DIR/part/"
run part || { tail "$TEST_DIR/part.log"; fail "part: the resumed run failed"; }
grep -q "^resume: .*step 8," "$TEST_DIR/part.log" || fail "part: did not resume from step 8"
scales() { grep '"loss"' "$1" | sed 's/.*"loss_scale":\([^,]*\),.*/\1/'; }
cmp <(scales "$TEST_DIR/whole/metrics.jsonl" | tail -6) <(scales "$TEST_DIR/part/metrics.jsonl") ||
    fail "the resumed run's scales differ from the uninterrupted run's"
cmp <(losses "$TEST_DIR/whole/metrics.jsonl" | tail -6) <(losses "$TEST_DIR/part/metrics.jsonl") ||
    fail "the resumed run's losses differ from the uninterrupted run's"
echo "steps 9-14 after the resume: scales and losses bit-identical to the uninterrupted run"
echo "loss scaling behaves as Megatron's scaler, across a resume too"
