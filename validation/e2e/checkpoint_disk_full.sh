#!/usr/bin/env bash
# A full file system (a 3 MiB tmpfs as &checkpoint dir; one checkpoint of this model is ~2 MiB):
# the first checkpoint fits, the second is refused by the space reservation before any HDF5
# call with a clear message, training goes on, the final save fails too -> exit code 5; the
# earlier checkpoint is intact and `latest` names it. Needs to mount a tmpfs (root, or a
# container that permits it): where that is not permitted the test is SKIPPED (exit 77) with
# the reason, never passed.
source "$(dirname "$0")/lib.bash"
mnt=$TEST_DIR/smallfs
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=3m tmpfs "$mnt" 2>"$TEST_DIR/mount.err"; then
    echo "skipped: cannot mount a tmpfs here ($(head -1 "$TEST_DIR/mount.err"))"
    exit 77
fi
trap 'umount "$mnt" 2>/dev/null' EXIT
cat >"$TEST_DIR/full.nml" <<NML
&run name = 'full', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = 6, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 2, keep = 2, dir = '$mnt' /
&log every = 1 /
NML
timeout 120 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/full.nml" >"$TEST_DIR/full.log" 2>&1
rc=$?
[ $rc -eq 5 ] || { tail -20 "$TEST_DIR/full.log"; fail "exit code $rc, expected 5"; }
grep "checkpoint at step 4 (every) not written: the file system of .* MiB free but the file needs .* training goes on" "$TEST_DIR/full.log" ||
    fail "no clear message for the periodic save"
grep -q "checkpoint at step 6 (final) not written" "$TEST_DIR/full.log" || fail "the final save did not report its failure"
grep -q '"step":6,"loss"' "$TEST_DIR/full/metrics.jsonl" || fail "training did not go on to step 6"
$PYTHON -c "import h5py,sys; f=h5py.File(sys.argv[1]); assert f.attrs['step']==2" "$mnt/ckpt_step00000002.h5" ||
    fail "the earlier checkpoint is not intact"
grep -q ckpt_step00000002.h5 "$mnt/latest" || fail "latest does not name step 2"
ls "$mnt" | grep -q '\.tmp$' && fail "a .tmp file was left behind"
echo "step-2 checkpoint intact, later saves refused with a message, exit code 5"
