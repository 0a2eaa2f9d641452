#!/usr/bin/env bash
# Stop signals at any time end the job with the documented behaviour, never a killed rank:
#  1. SIGTERM during setup (before the first step): exit 75, nothing to save, nothing written.
#  2. SIGTERM during resume: exit 75; the checkpoint it resumed from is the state (no new save),
#     and the next run resumes from it again.
#  3. SIGUSR1 during a checkpoint save: the save completes, no second save, exit 75; the file is
#     valid and the next run continues from it. Three times: (a) an asynchronous save (the
#     default), the signal inside the step's part of it (its snapshot); (b) the same save, the
#     signal while its background write goes on during the next step: the write is drained
#     (completed and verified), then that step is saved too (a signal saves the step it stops
#     at) and the next run continues from it; (c) a synchronous save (async = .false.).
#  4. SIGTERM sent to mpirun itself: Open MPI forwards it to the ranks after
#     odls_base_sigkill_timeout seconds and kills them that many seconds later. With the window
#     raised to 4 s (OMPI_MCA_odls_base_sigkill_timeout=4) the ranks finish their step, write the
#     checkpoint of that step and exit 75 inside it; the next run resumes from that step.
# The signals of 1-3 are raised by the rank itself at a fault point (LLMT_FAULT=point@rank:term),
# so they arrive exactly inside the phase under test.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name max_steps every [async]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = $2, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = $3, resume = 'auto', timeout_s = 30, async = ${4:-.true.} /
&log every = 1 /
NML
}
run_with_fault() { # name fault
    LLMT_FAULT=$2 timeout 120 $MPIRUN -np 2 -x LLMT_FAULT ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.$2.log" 2>&1
}
steps_of() { ls "$TEST_DIR/$1"/ckpt_step*.h5 2>/dev/null | sed 's/.*ckpt_step0*\([0-9]*\)\.h5/\1/' | tr '\n' ' '; }

echo "== 1. SIGTERM during setup"
nml setup 20 5
run_with_fault setup data@0:term
rc=$?
[ $rc -eq 75 ] || { tail "$TEST_DIR/setup.data@0:term.log"; fail "setup: exit code $rc, expected 75"; }
grep "received SIGTERM during setup at step 0: nothing trained yet" "$TEST_DIR/setup.data@0:term.log" ||
    fail "setup: no message about the signal"
[ -z "$(steps_of setup)" ] || fail "setup: a checkpoint was written: $(steps_of setup)"

echo "== 2. SIGTERM during resume"
nml resume 10 5
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/resume.nml" >"$TEST_DIR/resume.first.log" 2>&1 || fail "resume: first run failed"
sed -i "s/max_steps = 10/max_steps = 20/" "$TEST_DIR/resume.nml"
run_with_fault resume resume@1:term
rc=$?
[ $rc -eq 75 ] || { tail "$TEST_DIR/resume.resume@1:term.log"; fail "resume: exit code $rc, expected 75"; }
grep "received SIGTERM during setup at step 10: the checkpoint of this step exists" \
    "$TEST_DIR/resume.resume@1:term.log" || fail "resume: no message about the signal"
[ "$(steps_of resume)" = "5 10 " ] || fail "resume: checkpoints are '$(steps_of resume)', want '5 10 '"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/resume.nml" >"$TEST_DIR/resume.again.log" 2>&1 || fail "resume: run after the signal failed"
grep -q "^resume: .*step 10," "$TEST_DIR/resume.again.log" || fail "resume: did not resume from step 10"

save_case() { # name fault async: a SIGUSR1 inside a save of step 5 whose checkpoint serves it
    nml "$1" 20 5 "$3"
    run_with_fault "$1" "$2"
    rc=$?
    log=$TEST_DIR/$1.$2.log
    [ $rc -eq 75 ] || { tail "$log"; fail "$1: exit code $rc, expected 75"; }
    grep "received SIGUSR1 at step 5: the checkpoint of this step exists" "$log" || fail "$1: no message about the signal"
    [ "$(grep -c '^checkpoint:' "$log")" -eq 1 ] || fail "$1: expected exactly one checkpoint write"
    $MPIRUN -np 2 ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.again.log" 2>&1 || fail "$1: resumed run failed"
    grep -q "^resume: .*ckpt_step00000005.h5: step 5," "$TEST_DIR/$1.again.log" || fail "$1: did not resume from step 5"
}
echo "== 3a. SIGUSR1 during an asynchronous checkpoint save (its snapshot, inside the step)"
save_case save snapshot@0:usr1 .true.
grep -q "^checkpoint: step 5 (every) .*in the background" "$TEST_DIR/save.snapshot@0:usr1.log" ||
    fail "save: the save of step 5 was not asynchronous"

echo "== 3b. SIGUSR1 during the background write of a checkpoint (the next step trains)"
nml bg 20 5 .true.
run_with_fault bg save@0:usr1
rc=$?
log=$TEST_DIR/bg.save@0:usr1.log
[ $rc -eq 75 ] || { tail "$log"; fail "bg: exit code $rc, expected 75"; }
grep -q "^checkpoint: step 5 (every) .*in the background" "$log" || fail "bg: the write of step 5 was not drained and committed"
# the signal lands in whichever step trains while the writer runs (6, or later on a slow machine)
k=$(sed -n 's/^received SIGUSR1 at step \([0-9]*\): writing a checkpoint.*/\1/p' "$log")
[ -n "$k" ] && [ "$k" -gt 5 ] || { grep SIGUSR1 "$log"; fail "bg: no message about the signal in a step after 5"; }
grep -q "^checkpoint: step $k (signal)" "$log" || fail "bg: the signal checkpoint of step $k was not written"
[ "$(steps_of bg)" = "5 $k " ] || fail "bg: checkpoints are '$(steps_of bg)', want '5 $k '"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/bg.nml" >"$TEST_DIR/bg.again.log" 2>&1 || fail "bg: resumed run failed"
grep -q "^resume: .*ckpt_step$(printf %08d "$k").h5: step $k," "$TEST_DIR/bg.again.log" ||
    fail "bg: did not resume from step $k"
echo "bg: SIGUSR1 in step $k during the write of step 5: drained, step $k saved, resumed from it"

echo "== 3c. SIGUSR1 during a synchronous checkpoint save (async = .false.)"
save_case sync save@0:usr1 .false.
grep -q "^checkpoint: step 5 (every) .*in the background" "$TEST_DIR/sync.save@0:usr1.log" &&
    fail "sync: the save of step 5 was asynchronous with async = .false."

echo "== 4. SIGTERM to mpirun (Open MPI forwards it, then kills the ranks)"
nml launcher 100000 0
OMPI_MCA_odls_base_sigkill_timeout=4 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/launcher.nml" >"$TEST_DIR/launcher.log" 2>&1 &
pid=$!
for i in $(seq 600); do grep -q '"step":20,' "$TEST_DIR/launcher/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s.%N)
kill -TERM $pid
wait $pid
t1=$(date +%s.%N)
pkill -KILL -f "llmtrain $TEST_DIR/launcher.nml" 2>/dev/null
# the ranks' stdout is no longer read by mpirun once it is told to terminate (llmtrain then
# drops its lines rather than block on them): the files tell what happened
m=$TEST_DIR/launcher/metrics.jsonl
step=$(sed -n 's/^{"step":\([0-9]*\),"stopped_by":"SIGTERM","exit_code":75}$/\1/p' "$m")
[ -n "$step" ] || { tail -3 "$m"; fail "launcher: no record of the SIGTERM and exit code 75 in metrics.jsonl"; }
printf 'mpirun ended %.1f s after its SIGTERM; the ranks saved step %s\n' "$(echo "$t1 - $t0" | bc)" "$step"
grep -q "^{\"step\":$step,\"checkpoint\":\"signal\"" "$m" || fail "launcher: the signal checkpoint was not written"
[ -f "$TEST_DIR/launcher/ckpt_step$(printf %08d "$step").h5" ] || fail "launcher: ckpt_step of $step is missing"
sed -i "s/max_steps = 100000/max_steps = $((step + 2))/" "$TEST_DIR/launcher.nml"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/launcher.nml" >"$TEST_DIR/launcher.again.log" 2>&1 || fail "launcher: resumed run failed"
grep -q "^resume: .*step $step," "$TEST_DIR/launcher.again.log" || fail "launcher: did not resume from step $step"
echo "signals during setup, resume, a save and at the launcher all ended in exit 75 with the state saved"
