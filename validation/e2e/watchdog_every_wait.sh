#!/usr/bin/env bash
# Every blocking wait is watched: one rank stops itself (SIGSTOP, as a hung node would stop it)
# at a fault point inside each class of wait (LLMT_FAULT, src/core/fault.h), and its peers must
# end the job with the watchdog's exit code 4 and a message naming the phase, well within 30 s
# (timeout_s = io_timeout_s = 3 s here). Classes: before the namelist is read (startup timeout
# LLMT_STARTUP_TIMEOUT_S), setup collectives (grid), the data check, resume's reads, checkpoint
# and weights writes, the per-step stop-signal check, the end-of-run gather (trainer.c) and
# generation's all-gather of the logits over tp (gpt.c). Checkpoint writes twice: a synchronous
# save (async = .false.; with the default background writer a stopped rank stops its main thread
# too, and the peer's next tp all-reduce names it), and a background write that hangs on one
# rank while both main threads go on (rank 1's writer sleeps 20 s at the save point): the wait
# for it at the end of the run is watched with io_timeout_s.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name mode resume init_from [async]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5, mode = '$2', init_from = '${4:-}'
     prompt_ids = 1, 2, 3, max_new_tokens = 4 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = 6, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 3, resume = '$3', timeout_s = 3, io_timeout_s = 3, async = ${5:-.true.} /
&log every = 3 /
NML
}
# hang_case NAME FAULT WANT_PHASE NML: rank 1 stops at FAULT; the job must end with exit 4 in 30 s
hang_case() {
    local name=$1 fault=$2 want=$3 rc t0 t1
    t0=$(date +%s)
    LLMT_FAULT=$fault LLMT_STARTUP_TIMEOUT_S=3 timeout 60 $MPIRUN -np 2 -x LLMT_FAULT -x LLMT_STARTUP_TIMEOUT_S \
        ./llmtrain "$TEST_DIR/$4.nml" >"$TEST_DIR/$name.log" 2>&1
    rc=$?
    t1=$(date +%s)
    pkill -KILL -f "llmtrain $TEST_DIR/$4.nml" 2>/dev/null
    case $fault in # a sleep prints nothing: the phase named below shows it was reached
    *:sleep*) ;;
    *) grep -q "LLMT_FAULT: stop at" "$TEST_DIR/$name.log" || { tail "$TEST_DIR/$name.log"; fail "$name: the fault point was not reached"; } ;;
    esac
    [ $rc -eq 4 ] || { tail -20 "$TEST_DIR/$name.log"; fail "$name: exit code $rc, expected 4 (watchdog)"; }
    [ $((t1 - t0)) -le 30 ] || fail "$name: the job took $((t1 - t0)) s to end"
    local msg
    msg=$(grep -m1 "llmtrain: watchdog: rank 0 waited" "$TEST_DIR/$name.log")
    [ -n "$msg" ] || { tail "$TEST_DIR/$name.log"; fail "$name: no watchdog message from rank 0"; }
    case "$msg" in *"in '$want'"*) ;; *) fail "$name: the message does not name '$want': $msg" ;; esac
    echo "ok  $name ($((t1 - t0)) s): $msg"
}

nml train train none
# a finished run to resume from and generate with (nothing stopped)
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/train.nml" >"$TEST_DIR/ref.log" 2>&1 || { tail "$TEST_DIR/ref.log"; fail "reference run failed"; }
# each case runs in its own directory (a fresh run must not replace another run's files)
for c in startup setup data weights save_async step stats; do nml $c train none; done
nml save train none "" .false.
hang_case startup  startup@1  "reading the namelist"      startup
hang_case setup    setup@1    "building the process grid" setup
hang_case data     data@1     "checking the data"         data
hang_case weights  weights@1  "weights write"             weights
hang_case save     save@1     "checkpoint write"          save
hang_case save_async save@1:sleep20000 "waiting for the background checkpoint write" save_async
hang_case step     step@1     "stop-signal check"         step
hang_case stats    stats@1    "end-of-run statistics"     stats
# resume: the checkpoint of step 6 is read on two ranks; rank 1 stops before reading its tensors
nml resume train auto
cp -r "$TEST_DIR/train" "$TEST_DIR/resume"
sed -i "s/max_steps = 6/max_steps = 9/" "$TEST_DIR/resume.nml"
hang_case resume   resume@1   "checkpoint read"           resume
nml gen generate none "$TEST_DIR/train/weights_step000006.h5"
hang_case generate generate@1 "all-gather"                gen
echo "every class of wait ended the job with exit code 4 and named its phase"
