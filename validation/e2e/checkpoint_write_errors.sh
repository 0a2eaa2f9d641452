#!/usr/bin/env bash
# Checkpoint I/O degrades instead of aborting (2 ranks, tp = 2; a run to step 4 first, then runs
# that resume from it):
#  1. a write error inside HDF5 (a file-size limit of 1 MiB on rank 1 only, set after MPI_Init:
#     the space reservation on rank 0 passes, rank 1's MPI-IO writes of the tensor data fail
#     with EFBIG): the periodic save at step 8 is abandoned on every rank with one message naming
#     the rank, the dataset and HDF5's reason, its .tmp is removed, a metrics record says so,
#     training goes on, the final save fails too -> exit 5; step 4 and `latest` are intact and
#     the next run resumes from step 4.
#  2. a file-size limit on rank 0 (the reservation meets it before any HDF5 call): the same
#     outcome, the message says how much could not be allocated.
#  3. a checkpoint file that cannot be created (its .tmp name is taken by a directory): the
#     save at step 8 fails, the final one at step 12 succeeds -> exit 0, latest names step 12.
#  4. on load: a missing or damaged root attribute of the newest file is refused with a message
#     and the previous file is used; a file whose step attribute h5py rewrote as a UTF-8 string
#     is still not a number (refused), while UTF-8 string attributes as h5py writes them load.
#  5. more than 64 checkpoint files: the newest is found (without a `latest` pointer).
#  6. resume into a different model: refused naming the key (n_head), exit 2.
#  7. resume = 'auto' with the global batch left unset takes the global batch of the file it
#     actually resumes from: the newest file (global batch 16) is corrupt, the run falls back to
#     step 4 (global batch 8) and must train with 8, not with the refused file's 16.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name max_steps [extra &model keys]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = ${3:-4}, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = $2, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 4, keep = 5, resume = 'auto', io_timeout_s = 20 /
&log every = 4 /
NML
}
run() { # name [LLMT_FAULT]
    LLMT_FAULT=${2:-} timeout 120 $MPIRUN -np 2 -x LLMT_FAULT ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1
}
# a run directory holding the checkpoint of step 4 of run `base`
start_from_step4() { # name
    nml "$1" 4 && run "$1" || { tail "$TEST_DIR/$1.log"; fail "$1: the run to step 4 failed"; }
    sed -i "s/max_steps = 4/max_steps = 12/" "$TEST_DIR/$1.nml"
}
expect_failed_saves() { # name rank_or_reason
    local d=$TEST_DIR/$1 log=$TEST_DIR/$1.log
    grep "checkpoint at step 8 (every) not written: .*$2.*training goes on" "$log" ||
        { tail -20 "$log"; fail "$1: no message about the failed periodic save"; }
    grep -q "checkpoint at step 12 (final) not written" "$log" || fail "$1: the final save did not fail"
    grep -q '"step":8,"checkpoint":"every","failed":true' "$d/metrics.jsonl" || fail "$1: no metrics record of the failed save"
    grep -q '"step":12,"loss"' "$d/metrics.jsonl" || fail "$1: training did not go on to step 12"
    ls "$d" | grep -q '\.tmp$' && fail "$1: a .tmp file was left: $(ls "$d")"
    grep -q "ckpt_step00000004.h5" "$d/latest" || fail "$1: latest does not name step 4 any more"
    [ "$(ls "$d" | grep -c '^ckpt_step')" -eq 1 ] || fail "$1: checkpoints are $(ls "$d" | grep '^ckpt_step' | tr '\n' ' ')"
    nml "${1}_next" 12 && sed -i "s/name = '${1}_next'/name = '$1'/" "$TEST_DIR/${1}_next.nml"
    run "${1}_next" || { tail "$TEST_DIR/${1}_next.log"; fail "$1: the run after the failures failed"; }
    grep -q "^resume: .*ckpt_step00000004.h5: step 4," "$TEST_DIR/${1}_next.log" || fail "$1: the next run did not resume from step 4"
}

echo "== 1. a write error inside HDF5 (EFBIG on rank 1's data writes)"
start_from_step4 efbig1
run efbig1 setup@1:fsize1048576
rc=$?
[ $rc -eq 5 ] || { tail -20 "$TEST_DIR/efbig1.log"; fail "efbig1: exit code $rc, expected 5"; }
expect_failed_saves efbig1 "rank 1 (host .*): writing dataset /.* failed:"

echo "== 2. the reservation meets the limit (rank 0) before HDF5"
start_from_step4 efbig0
run efbig0 setup@0:fsize1048576
rc=$?
[ $rc -eq 5 ] || { tail -20 "$TEST_DIR/efbig0.log"; fail "efbig0: exit code $rc, expected 5"; }
expect_failed_saves efbig0 "MiB cannot be allocated in .*: File too large"

echo "== 3. a checkpoint file that cannot be created"
start_from_step4 create
mkdir "$TEST_DIR/create/ckpt_step00000008.h5.tmp"
run create
rc=$?
[ $rc -eq 0 ] || { tail -20 "$TEST_DIR/create.log"; fail "create: exit code $rc, expected 0"; }
grep "checkpoint at step 8 (every) not written: .*cannot create .*ckpt_step00000008.h5.tmp" "$TEST_DIR/create.log" ||
    fail "create: no message about the file that could not be created"
grep -q "ckpt_step00000012.h5" "$TEST_DIR/create/latest" || fail "create: latest does not name step 12"

echo "== 4. damaged or h5py-written attributes"
nml attrs 12 && run attrs || fail "attrs: run failed"
newest=$TEST_DIR/attrs/ckpt_step00000012.h5
$PYTHON - "$newest" "$TEST_DIR/attrs/ckpt_step00000008.h5" <<'PY' || fail "attrs: h5py edit failed"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["adam_t"]                      # a missing state attribute
with h5py.File(sys.argv[2], "r+") as f:      # h5py's own strings: variable-length UTF-8
    for k in ("format", "kind", "run_id", "llmtrain_version"):
        v = f.attrs[k]
        f.attrs[k] = v.decode() if isinstance(v, bytes) else str(v)
    assert h5py.check_string_dtype(f.attrs.get_id("run_id").dtype).encoding == "utf-8"
PY
sed -i "s/max_steps = 12/max_steps = 14/" "$TEST_DIR/attrs.nml"
run attrs || { tail "$TEST_DIR/attrs.log"; fail "attrs: resume after the damage failed"; }
grep "refused checkpoint .*ckpt_step00000012.h5: root attribute 'adam_t' is missing" "$TEST_DIR/attrs.log" ||
    fail "attrs: the missing attribute was not reported"
grep -q "^resume: .*ckpt_step00000008.h5: step 8," "$TEST_DIR/attrs.log" ||
    fail "attrs: did not fall back to step 8 (whose string attributes h5py rewrote as UTF-8)"
echo "fell back to step 8, whose attributes h5py rewrote as UTF-8 strings"

echo "== 5. more than 64 checkpoint files"
nml many 6 && run many || fail "many: run failed"
for s in $(seq 1 5) $(seq 100 180); do  # 86 older copies (their step attribute says 4)
    [ -f "$TEST_DIR/many/ckpt_step$(printf %08d $s).h5" ] && continue
    cp "$TEST_DIR/many/ckpt_step00000004.h5" "$TEST_DIR/many/ckpt_step$(printf %08d $s).h5"
done
mv "$TEST_DIR/many/ckpt_step00000006.h5" "$TEST_DIR/many/ckpt_step00000999.h5"
rm "$TEST_DIR/many/latest"
n_files=$(ls "$TEST_DIR/many" | grep -c '^ckpt_')
sed -i "s/max_steps = 6/max_steps = 8/" "$TEST_DIR/many.nml"
run many || { tail "$TEST_DIR/many.log"; fail "many: resume failed"; }
grep -q "^resume: .*ckpt_step00000999.h5: step 6," "$TEST_DIR/many.log" ||
    { grep "^resume" "$TEST_DIR/many.log"; fail "many: the newest of $n_files files was not used"; }
echo "the newest of $n_files checkpoint files was found"

echo "== 6. resume into another model"
nml other 14 8 && sed -i "s/name = 'other'/name = 'attrs'/" "$TEST_DIR/other.nml"
sed -i "s/resume = 'auto'/resume = '$(echo "$TEST_DIR" | sed 's|/|\\/|g')\\/attrs\\/ckpt_step00000008.h5'/" "$TEST_DIR/other.nml"
run other
rc=$?
[ $rc -eq 2 ] || { tail "$TEST_DIR/other.log"; fail "other: exit code $rc, expected 2"; }
grep "was written for &model n_head = 4, but the namelist has n_head = 8" "$TEST_DIR/other.log" ||
    fail "other: the message does not name n_head"
echo "== 7. the global batch of the file actually used"
nml gb 4 && run gb || fail "gb: first run failed"
sed -i "s/max_steps = 4/max_steps = 8/; s/global_batch = 8/global_batch = 16/" "$TEST_DIR/gb.nml"
run gb || fail "gb: run with global batch 16 failed"
$PYTHON - "$TEST_DIR/gb/ckpt_step00000008.h5" <<'PY' || fail "gb: corrupting failed"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["global_batch"] == 16
    off = f["model/wte"].id.get_offset() + 100
with open(sys.argv[1], "r+b") as g:
    g.seek(off); b = g.read(1); g.seek(off); g.write(bytes([b[0] ^ 1]))
PY
sed -i "s/max_steps = 8/max_steps = 10/; s/, global_batch = 16//" "$TEST_DIR/gb.nml"
run gb || { tail "$TEST_DIR/gb.log"; fail "gb: the resumed run failed"; }
grep -q "^resume: .*ckpt_step00000004.h5: step 4," "$TEST_DIR/gb.log" || fail "gb: did not fall back to step 4"
grep "^batch: global 8 sequences" "$TEST_DIR/gb.log" || { grep "^batch" "$TEST_DIR/gb.log"; fail "gb: not the global batch of the step-4 file"; }
echo "all checkpoint write and read failures degraded as documented"
