#!/usr/bin/env bash
# Which checkpoint a run resumes from and which ones it keeps (2 ranks, tp = 2):
#  1. a stale `latest` (the job died between publishing step 12 and moving `latest`, which still
#     names step 4): resume = 'auto' takes step 12, the newest valid file of the lineage.
#  2. a fresh run with &checkpoint overwrite = .true. over an older run's files, killed before
#     its first save and requeued (SLURM_RESTART_COUNT = 1 makes resume 'auto'): it starts from
#     step 0 in its own lineage, not from the older run's step 8; the older files stay.
#  3. a run resumed from an older checkpoint (resume = path to step 4 while 8 and 12 exist):
#     pruning (keep = 3) keeps the file it resumed from and its own new one, and removes the
#     abandoned branch's files beyond keep; resume = 'auto' then continues the new branch.
#  4. a checkpoint whose `step` attribute was edited to -5 (h5py): resume = 'auto' refuses it
#     with a warning naming the file and the attribute and takes the next older file; pruning
#     neither counts it toward keep nor deletes it (one warning); resume = path to such a file:
#     exit 2, one error line naming the file, the attribute, rank 0 and its host.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
# KEEP_GOING=1: report every failure instead of stopping at the first (to see all that an older
# build gets wrong)
[ -n "${KEEP_GOING:-}" ] && fail() { echo "FAIL: $*"; FAILED=1; }
nml() { # name max_steps every keep resume(- = not set) [overwrite]
    local resume="resume = '$5',"
    [ "$5" = "-" ] && resume=""
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = $2, micro_batch = 4, global_batch = 8, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = $3, keep = $4, $resume overwrite = ${6:-.false.} /
&log every = 1 /
NML
}
run() { timeout 120 $MPIRUN -np 2 "${@:3}" ./llmtrain "$TEST_DIR/$2.nml" >"$TEST_DIR/$1.log" 2>&1; }
ckpts() { ls "$TEST_DIR/$1" | grep '^ckpt_step.*\.h5$' | sed 's/ckpt_step0*\([0-9]\)/\1/; s/\.h5//' | sort -n | tr '\n' ' '; }
run_id() { $PYTHON -c 'import h5py, sys; v = h5py.File(sys.argv[1], "r").attrs["run_id"]; print(v.decode() if isinstance(v, bytes) else v)' "$1"; }
resumed_step() { sed -n 's/^resume: .*ckpt_step0*\([0-9][0-9]*\)\.h5: step .*/\1/p' "$TEST_DIR/$1.log"; }

echo "== 1. a stale 'latest' does not hide a newer valid checkpoint of the lineage"
nml st 12 4 5 none
run st st || { tail "$TEST_DIR/st.log"; fail "st: run failed"; }
echo "ckpt_step00000004.h5" >"$TEST_DIR/st/latest" # the job died before moving latest to 12
nml st 14 4 5 auto
run st2 st || { tail "$TEST_DIR/st2.log"; fail "st: resume failed"; }
got=$(resumed_step st2)
[ "$got" = 12 ] || { grep '^resume' "$TEST_DIR/st2.log"; fail "stale latest: resumed from step '$got', expected 12 (latest named 4)"; }
echo "latest named step 4; resumed from step 12"

echo "== 2. a fresh overwrite run requeued before its first save keeps its own lineage"
nml ow 8 4 5 none
run ow ow || { tail "$TEST_DIR/ow.log"; fail "ow: the older run failed"; }
old_id=$(run_id "$TEST_DIR/ow/ckpt_step00000008.h5")
nml ow 1000000 0 5 - .true. # resume not set: 'none' now, 'auto' once requeued; no saves
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/ow.nml" >"$TEST_DIR/ow_fresh.log" 2>&1 &
pid=$!
up=0
for i in $(seq 1200); do grep -qE '^step +3/' "$TEST_DIR/ow_fresh.log" && up=1 && break; sleep 0.05; done
pkill -KILL -P $pid # the ranks die hard (a node failure) before any save
wait_gone $pid 30 || { kill -KILL $pid; fail "ow: the killed run did not end"; }
[ $up -eq 1 ] || { tail "$TEST_DIR/ow_fresh.log"; fail "ow: the fresh run never reached step 3"; }
new_id=$(cat "$TEST_DIR/ow/lineage" 2>/dev/null)
sed -i "s/max_steps = 1000000/max_steps = 6/; s/every = 0/every = 3/" "$TEST_DIR/ow.nml"
SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 run ow_requeued ow -x SLURM_JOB_ID -x SLURM_RESTART_COUNT ||
    { tail "$TEST_DIR/ow_requeued.log"; fail "ow: the requeued run failed"; }
grep -q "continuing from the newest checkpoint (resume = 'auto')" "$TEST_DIR/ow_requeued.log" ||
    fail "ow: the requeue did not make resume 'auto'"
got=$(resumed_step ow_requeued)
[ -z "$got" ] || fail "ow: the requeued fresh run continued the older run's lineage from step $got"
grep "starting from step 0" "$TEST_DIR/ow_requeued.log" || fail "ow: no line saying it starts from step 0"
[ "$(ckpts ow)" = "3 4 6 8 " ] || fail "ow: checkpoints are '$(ckpts ow)', expected 3 4 6 8 (the older run's 4 and 8 kept)"
id3=$(run_id "$TEST_DIR/ow/ckpt_step00000006.h5")
[ -n "$new_id" ] && [ "$id3" = "$new_id" ] && [ "$id3" != "$old_id" ] ||
    fail "ow: the requeued run saved in lineage '$id3'; the fresh run's was '$new_id', the older run's '$old_id'"
echo "requeued fresh run: step 0 in its own lineage $id3 (older run: $old_id, its files kept)"

echo "== 3. pruning keeps the checkpoint a run resumed from, not an abandoned branch"
nml br 12 4 3 none
run br br || { tail "$TEST_DIR/br.log"; fail "br: run failed"; }
nml br 6 2 3 "$TEST_DIR/br/ckpt_step00000004.h5"
run br_from4 br || { tail "$TEST_DIR/br_from4.log"; fail "br: resume from step 4 failed"; }
[ "$(resumed_step br_from4)" = 4 ] || fail "br: did not resume from step 4"
[ "$(ckpts br)" = "4 6 12 " ] ||
    fail "br: after resuming from 4 and saving 6 (keep 3) the checkpoints are '$(ckpts br)', expected 4 6 12 (8 of the abandoned branch removed, the file resumed from kept)"
nml br 8 2 3 auto
run br_auto br || { tail "$TEST_DIR/br_auto.log"; fail "br: resume = 'auto' failed"; }
[ "$(resumed_step br_auto)" = 6 ] || fail "br: auto resumed from step '$(resumed_step br_auto)', expected 6 (the new branch), not 12"
[ "$(ckpts br)" = "4 6 8 " ] || fail "br: checkpoints '$(ckpts br)', expected 4 6 8"
echo "resumed from 4: kept 4 6 12, removed 8; auto continued from 6; then 4 6 8"

echo "== 4. an edited step attribute: refused, the previous file used, left in place"
$PYTHON - "$TEST_DIR/br/ckpt_step00000008.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["step"] = np.int64(-5)
PY
cp "$TEST_DIR/br/ckpt_step00000008.h5" "$TEST_DIR/edited.h5"
nml br 10 3 3 auto
run br_edit br || { tail "$TEST_DIR/br_edit.log"; fail "br: resume past the edited file failed"; }
grep "warning: resume: refused .*ckpt_step00000008.h5: attribute 'step' is -5" "$TEST_DIR/br_edit.log" ||
    { grep -i 'resume' "$TEST_DIR/br_edit.log"; fail "br: the edited file was not refused naming file and attribute"; }
[ "$(resumed_step br_edit)" = 6 ] || fail "br: resumed from step '$(resumed_step br_edit)', expected 6"
grep -q '"step":-' "$TEST_DIR/br/metrics.jsonl" && fail "br: a negative step was logged"
[ "$(ckpts br)" = "6 8 9 10 " ] ||
    fail "br: checkpoints '$(ckpts br)', expected 6 8 9 10 (keep 3: 10 9 and 6, resumed from; the edited 8 left, not counted)"
grep "warning: 1 checkpoint file in .* cannot be used and is left in place, not counted toward &checkpoint keep.* ckpt_step00000008.h5" "$TEST_DIR/br_edit.log" ||
    fail "br: no warning about the unusable file"
[ "$(grep -c 'cannot be used and is left in place' "$TEST_DIR/br_edit.log")" -eq 1 ] || fail "br: the unusable file was reported more than once"
nml expl 10 3 3 "$TEST_DIR/edited.h5"
run expl expl
rc=$?
[ $rc -eq 2 ] || { tail "$TEST_DIR/expl.log"; fail "resume = path to the edited file: exit $rc, expected 2"; }
[ "$(grep -c 'llmtrain: error' "$TEST_DIR/expl.log")" -eq 1 ] || { cat "$TEST_DIR/expl.log"; fail "expl: not exactly one error line"; }
grep "llmtrain: error: rank 0 (host $(hostname)): &checkpoint resume: checkpoint $TEST_DIR/edited.h5: attribute 'step' is -5" "$TEST_DIR/expl.log" ||
    { cat "$TEST_DIR/expl.log"; fail "expl: the message does not name rank, host, file and attribute"; }
grep -qiE "core dumped|segmentation|MPI_ABORT was invoked" "$TEST_DIR/expl.log" && fail "expl: crash/abort banner"
if grep -l "HDF5-DIAG" "$TEST_DIR"/*.log; then fail "HDF5's error stack reached the user"; fi
[ -z "${FAILED:-}" ] || exit 1
echo "checkpoint lineage: ok"
