#!/usr/bin/env bash
# TensorBoard events mirror metrics.jsonl (2 ranks, tiny model, 8 steps, validation every 4,
# checkpoints every 4): validation/tensorboard_check.py reads <run dir>/tb with tensorboard's own
# EventAccumulator and checks every scalar equals the metrics.jsonl number rounded to float32
# (exact), every string its text, the same (tag, step) pairs both ways; checks every record's
# length and masked CRC-32C itself (the reader silently stops at a bad CRC); and cuts the file
# inside a record (header, data): every earlier record still reads, nothing of the torn one.
# Also: rank 1 writes no event file; &log tensorboard = .false. writes no tb/; a tb/ that cannot
# be created is one message and exit 2 on both ranks.
source "$(dirname "$0")/lib.bash"
export PYTHONPATH=.deps/python
$PYTHON -c "from tensorboard.backend.event_processing import event_accumulator" 2>/dev/null ||
    bash validation/deps.sh --if-missing >/dev/null 2>&1
$PYTHON -c "from tensorboard.backend.event_processing import event_accumulator" 2>/dev/null || {
    echo "SKIP: tensorboard is not importable from .deps/python (validation/deps.sh could not install it)"; exit 77; }
run() { # name [mpirun args]
    timeout 120 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1
}
add_checkpoints() { printf '&checkpoint\n  every = 4\n/\n' >>"$1"; }

write_tiny_nml "$TEST_DIR/tb.nml" name=tb max_steps=8 dp=2 val_every=4
add_checkpoints "$TEST_DIR/tb.nml"
run tb || { tail "$TEST_DIR/tb.log"; fail "llmtrain exited $?"; }
d=$TEST_DIR/tb
[ "$(ls "$d/tb" | wc -l)" -eq 1 ] || fail "expected one event file (rank 0's) in $d/tb: $(ls "$d/tb")"
case "$(ls "$d/tb")" in events.out.tfevents.[0-9]*."$(hostname)") ;; *) fail "event file name $(ls "$d/tb")";; esac
$PYTHON validation/tensorboard_check.py "$d" || fail "TensorBoard events differ from metrics.jsonl"

echo "== &log tensorboard = .false."
write_tiny_nml "$TEST_DIR/off.nml" name=off max_steps=2 dp=2
sed -i 's/^  every = 1$/  every = 1, tensorboard = .false./' "$TEST_DIR/off.nml"
run off || { tail "$TEST_DIR/off.log"; fail "tensorboard = .false. run exited $?"; }
[ ! -e "$TEST_DIR/off/tb" ] || fail "tensorboard = .false. still made $TEST_DIR/off/tb"
echo "no tb/ with tensorboard = .false."

echo "== a tb/ that cannot be created"
write_tiny_nml "$TEST_DIR/blocked.nml" name=blocked max_steps=2 dp=2
mkdir -p "$TEST_DIR/blocked" && echo x >"$TEST_DIR/blocked/tb"
run blocked; rc=$?
[ $rc -eq 2 ] || { tail "$TEST_DIR/blocked.log"; fail "blocked tb/: exit code $rc, expected 2"; }
grep -F "cannot create the TensorBoard directory (&log tensorboard) $TEST_DIR/blocked/tb" "$TEST_DIR/blocked.log" ||
    { tail "$TEST_DIR/blocked.log"; fail "blocked tb/: the message does not name the directory"; }
[ "$(grep -c 'llmtrain: error' "$TEST_DIR/blocked.log")" -eq 1 ] || fail "blocked tb/: not exactly one error line"
! grep -q '^step ' "$TEST_DIR/blocked.log" || fail "blocked tb/: training started"
echo "PASS"
