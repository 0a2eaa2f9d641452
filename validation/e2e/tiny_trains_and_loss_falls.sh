#!/usr/bin/env bash
# inputs/tiny.nml as a user runs it: 50 steps; the loss of the last 5 steps is at least 1.0 nat
# below the first step's (ln 500 = 6.2 at the start);
# validation loss is reported; metrics.jsonl and the final weights exist and h5py reads every
# tensor in its global shape.
source "$(dirname "$0")/lib.bash"
sed "s|out_dir = 'runs'|out_dir = '$TEST_DIR'|" inputs/tiny.nml >"$TEST_DIR/tiny.nml"
$MPIRUN -np 1 ./llmtrain "$TEST_DIR/tiny.nml" >"$TEST_DIR/out.log" 2>&1 || { cat "$TEST_DIR/out.log"; fail "llmtrain exited $?"; }
cat "$TEST_DIR/out.log" | grep -E "^step|^val|model:|memory plan"
m=$TEST_DIR/tiny/metrics.jsonl
[ "$(losses "$m" | wc -l)" -eq 50 ] || fail "expected 50 loss lines in $m"
first=$(losses "$m" | head -1)
last5=$(losses "$m" | tail -5 | awk '{s+=$1} END {print s/NR}')
echo "first loss $first, mean of last 5 $last5"
awk -v a="$first" -v b="$last5" 'BEGIN {exit !(a - b >= 1.0)}' || fail "loss did not fall by 1.0: $first -> $last5"
grep -q '"val_loss"' "$m" || fail "no val_loss in $m"
$PYTHON - "$TEST_DIR/tiny/weights_step000050.h5" <<'PY' || fail "h5py check failed"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["step"] == 50, f.attrs["step"]
m = f["model"]
assert m["wte"].shape == (512, 64), m["wte"].shape
assert m["wpe"].shape == (32, 64)
assert m["h.1.attn.qkv.w"].shape == (192, 64)
assert m["h.0.mlp.fc.b"].shape == (256,)
print("h5py: %d tensors, wte %s, step %d" % (len(m), m["wte"].shape, f.attrs["step"]))
PY
