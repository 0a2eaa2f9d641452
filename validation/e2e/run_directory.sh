#!/usr/bin/env bash
# A run directory belongs to one run (2 ranks):
#  1. a second run in the directory of a running one refuses to start (exit 2, naming the owner's
#     pid and host); the first is not disturbed.
#  2. stale locks are taken over with a warning: a dead pid on this host, a pid that now runs
#     another program, a heartbeat older than
#     60 s (another host), an earlier run of the same Slurm job (a requeue: a lower
#     SLURM_RESTART_COUNT); a live lock of another host with a fresh heartbeat is refused, also
#     one of the same job run (2b: a second llmtrain started in the job while the first runs).
#  3. a fresh run (resume = 'none') into a directory with an older run's files refuses (exit 2);
#     with &checkpoint overwrite = .true. it runs, and pruning deletes only its own checkpoints:
#     the older run's higher-step files stay, `latest` names the new run's newest, and a later
#     resume = 'auto' continues the new run's lineage.
#  4. directories are checked at startup: a checkpoint dir under a regular file, a read-only file
#     system (tmpfs, when mounting is permitted): exit 2 before any training, naming the path.
#  5. HDF5's own diagnostic stack never reaches the user.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name max_steps every keep resume [overwrite] [dir]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = $2, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = $3, keep = $4, resume = '$5', overwrite = ${6:-.false.}, dir = '${7:-}' /
&log every = 50 /
NML
}
run() { timeout 120 $MPIRUN -np 2 "${@:2}" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1; }
expect_refused() { # name rc want
    [ "$2" -eq 2 ] || { tail "$TEST_DIR/$1.log"; fail "$1: exit code $2, expected 2"; }
    grep -F -- "$3" "$TEST_DIR/$1.log" || { tail "$TEST_DIR/$1.log"; fail "$1: the message lacks '$3'"; }
    [ "$(grep -c 'llmtrain: error' "$TEST_DIR/$1.log")" -eq 1 ] || fail "$1: not exactly one error line"
}
lock=$TEST_DIR/busy/.llmtrain.lock

echo "== 1. a second run while the first runs"
nml busy 1000000 0 1 auto
launch_until_step 2 "$TEST_DIR/busy.nml" busy 5
first=$LAUNCH_PID
owner=$(sed -n 's/^pid=//p' "$lock")
cp "$TEST_DIR/busy.nml" "$TEST_DIR/busy2.nml"
run busy2
expect_refused busy2 $? "is in use: $lock names llmtrain pid $owner on host $(hostname)"
kill -0 $first || fail "busy: the first run died"
pkill -USR1 -f "llmtrain $TEST_DIR/busy.nml"
wait $first
rc=$?
[ $rc -eq 75 ] || { tail -15 "$TEST_DIR/busy.log"; fail "busy: the first run ended with $rc after SIGUSR1, expected 75"; }
[ -f "$lock" ] && fail "busy: the lock was left behind by a run that ended"

echo "== 2. stale and live locks"
sed -i "s/max_steps = 1000000/max_steps = 2/" "$TEST_DIR/busy.nml"
printf 'host=%s\npid=999999\njob=\nstarted=1\n' "$(hostname)" >"$lock"
run busy || fail "dead pid: the run did not start"
grep "took over the stale lock .* of pid 999999 on host $(hostname): its process no longer exists" "$TEST_DIR/busy.log" ||
    fail "dead pid: no warning naming the stale lock"
sleep 60 &
other=$!
printf 'host=%s\npid=%d\njob=\nstarted=1\n' "$(hostname)" $other >"$lock"
run busy || fail "reused pid: the run did not start"
kill $other
grep -q "of pid $other on host $(hostname): its pid now belongs to another program" "$TEST_DIR/busy.log" ||
    fail "reused pid: no warning (the lock named a live process that is not llmtrain)"
printf 'host=elsewhere\npid=4242\njob=\nstarted=1\n' >"$lock"
run busy
expect_refused busy $? "names llmtrain pid 4242 on host elsewhere"
touch -d '-2 minutes' "$lock"
sed -i "s/max_steps = 2/max_steps = 3/" "$TEST_DIR/busy.nml"
run busy || fail "old heartbeat: the run did not start"
grep -q "of pid 4242 on host elsewhere: its heartbeat stopped" "$TEST_DIR/busy.log" || fail "old heartbeat: no warning"
printf 'host=elsewhere\npid=4242\njob=777\nrestart=0\nstarted=1\n' >"$lock"
sed -i "s/max_steps = 3/max_steps = 4/" "$TEST_DIR/busy.nml"
SLURM_JOB_ID=777 run busy -x SLURM_JOB_ID
expect_refused busy $? "names llmtrain pid 4242 on host elsewhere, Slurm job 777 (this job: a second llmtrain"
SLURM_JOB_ID=777 SLURM_RESTART_COUNT=1 run busy -x SLURM_JOB_ID -x SLURM_RESTART_COUNT ||
    { tail "$TEST_DIR/busy.log"; fail "requeued job: the run did not start"; }
grep -q "it belongs to an earlier run of this Slurm job (requeued)" "$TEST_DIR/busy.log" || fail "requeued job: no warning"

echo "== 2b. a second llmtrain in the same Slurm job while the first runs"
nml same 1000000 0 1 auto
SLURM_JOB_ID=778 MPIRUN="$MPIRUN -x SLURM_JOB_ID" launch_until_step 2 "$TEST_DIR/same.nml" same 5
first=$LAUNCH_PID
slock=$TEST_DIR/same/.llmtrain.lock
owner=$(sed -n 's/^pid=//p' "$slock")
cp "$TEST_DIR/same.nml" "$TEST_DIR/same2.nml"
SLURM_JOB_ID=778 run same2 -x SLURM_JOB_ID
expect_refused same2 $? "is in use: $slock names llmtrain pid $owner on host $(hostname), Slurm job 778 (this job"
kill -0 $first || fail "same job: the first run died"
grep -q "pid=$owner" "$slock" || fail "same job: the lock was taken from the live run"
pkill -USR1 -P $first
wait $first
rc=$?
[ $rc -eq 75 ] || { tail -15 "$TEST_DIR/same.log"; fail "same job: the first run ended with $rc after SIGUSR1, expected 75"; }

echo "== 3. a fresh run over an older run's files"
nml old 20 5 2 none
run old || fail "old: run failed"
nml old_fresh 10 5 1 none && sed -i "s/name = 'old_fresh'/name = 'old'/" "$TEST_DIR/old_fresh.nml"
run old_fresh
expect_refused old_fresh $? "a fresh run (&checkpoint resume = 'none') would replace an older run's files"
grep -q "2 checkpoint files, the 'latest' pointer, 2 weights files, metrics.jsonl" "$TEST_DIR/old_fresh.log" ||
    fail "old_fresh: the message does not list what is there"
nml old_over 10 5 1 none .true. && sed -i "s/name = 'old_over'/name = 'old'/" "$TEST_DIR/old_over.nml"
run old_over || { tail "$TEST_DIR/old_over.log"; fail "old_over: the run with overwrite failed"; }
ckpts=$(ls "$TEST_DIR/old" | grep '^ckpt_step' | tr '\n' ' ')
[ "$ckpts" = "ckpt_step00000010.h5 ckpt_step00000015.h5 ckpt_step00000020.h5 " ] ||
    fail "old_over: checkpoints are '$ckpts' (the older run's 15 and 20 must stay, the new run keeps 1: its 10)"
grep -q "ckpt_step00000010.h5" "$TEST_DIR/old/latest" || fail "old_over: latest does not name the new run's step 10"
nml old_auto 12 5 1 auto && sed -i "s/name = 'old_auto'/name = 'old'/" "$TEST_DIR/old_auto.nml"
run old_auto || fail "old_auto: resume failed"
grep -q "^resume: .*ckpt_step00000010.h5: step 10," "$TEST_DIR/old_auto.log" || fail "old_auto: did not resume the new lineage"
grep -q "2 checkpoints .* belong to another run" "$TEST_DIR/old_auto.log" || fail "old_auto: the other run's files are not mentioned"
echo "overwrite kept the older run's checkpoints 15 and 20; resume continued the new run from 10"

echo "== 4. directories checked at startup"
touch "$TEST_DIR/a_file"
nml nodir 4 2 1 none .false. "$TEST_DIR/a_file/ckpt"
run nodir
expect_refused nodir $? "cannot create the checkpoint directory (&checkpoint dir) $TEST_DIR/a_file/ckpt: Not a directory"
grep -q '"step":1,' "$TEST_DIR/nodir/metrics.jsonl" 2>/dev/null && fail "nodir: it trained before refusing"
mnt=$TEST_DIR/ro
mkdir -p "$mnt"
if mount -t tmpfs -o ro,size=1m tmpfs "$mnt" 2>/dev/null; then
    trap 'umount "$mnt" 2>/dev/null' EXIT
    nml rofs 4 2 1 none .false. "$mnt"
    run rofs
    expect_refused rofs $? "is not writable: Read-only file system"
else
    echo "mounting a read-only tmpfs is not permitted here: that case was not run"
fi

echo "== 5. no HDF5 diagnostic stack in any output"
if grep -l "HDF5-DIAG" "$TEST_DIR"/*.log; then fail "HDF5's error stack reached the user"; fi
echo "a run directory belongs to one run"
