#!/usr/bin/env bash
# A hung rank never hangs the job silently: SIGSTOP one of 4 ranks (dp 2 x tp 2) mid-training;
# its peers wait in a collective, and after &checkpoint timeout_s = 5 the watchdog prints which
# phase, step and peers they waited on and ends the job (non-zero) well within 60 s.
# Also the watchdog's own MPI demo: a rank that never joins a barrier ends the job with code 4.
source "$(dirname "$0")/lib.bash"
cat >$TEST_DIR/hang.nml <<NML
&run name = 'hang', out_dir = '$TEST_DIR' /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 2, tp = 2 /
&train max_steps = 100000, micro_batch = 2, global_batch = 8 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint timeout_s = 5 /
&log every = 1 /
NML
launch_until_step 4 $TEST_DIR/hang.nml hang 3
pid=$LAUNCH_PID
victim=$(pgrep -f '^\./llmtrain .*hang\.nml' | sed -n 3p)
[ -n "$victim" ] || fail "no rank process found"
t0=$(date +%s)
kill -STOP $victim
if ! wait_gone $pid 60; then
    pkill -KILL -f 'llmtrain .*hang\.nml'
    fail "the job still runs 60 s after the rank was stopped"
fi
wait $pid
rc=$?
echo "stopped rank pid $victim: job ended with exit code $rc after $(($(date +%s) - t0)) s"
pkill -KILL -f '^\./llmtrain .*hang\.nml'
[ $rc -ne 0 ] || fail "exit code 0"
grep "llmtrain: watchdog: rank .* waited .* in '.*' at step [0-9]* for .*group ranks" $TEST_DIR/hang.log | head -2 ||
    fail "no watchdog message naming phase, step and peers"
$MPIRUN -np 3 build/tests/test_watchdog --hang-demo >$TEST_DIR/demo.log 2>&1
rc=$?
[ $rc -eq 4 ] || { cat $TEST_DIR/demo.log; fail "hang demo: exit $rc, expected 4"; }
grep -m1 "llmtrain: watchdog:" $TEST_DIR/demo.log
