#!/usr/bin/env bash
# on_anomaly: a NaN injected into the gradient at step 5 (&train inject_nan_step = 4, 0-based)
#  skip  -> the update is discarded and counted, training goes on with finite losses;
#  abort -> exit code 2 with a message naming the step;
#  warn  -> the update is applied, a warning is printed and the run completes;
# and an unknown policy name (on_spike = 'rewind') is refused naming the key, exit 2.
source "$(dirname "$0")/lib.bash"
write_tiny_nml $TEST_DIR/skip.nml name=skip max_steps=10 anomaly=skip inject=4
$MPIRUN -np 1 ./llmtrain $TEST_DIR/skip.nml >$TEST_DIR/skip.log 2>&1 || { cat $TEST_DIR/skip.log; fail "skip run failed"; }
grep -q '"step":5,.*"applied":false' $TEST_DIR/skip/metrics.jsonl || fail "step 5 not marked skipped"
grep -q '"step":10,.*"skipped":1,' $TEST_DIR/skip/metrics.jsonl || fail "skipped count is not 1 at the end"
last=$(losses $TEST_DIR/skip/metrics.jsonl | tail -1)
[ "$last" != null ] || fail "loss not finite after a skipped step"
grep -q "1 of 10 steps skipped" $TEST_DIR/skip.log || fail "no summary of skipped steps"
echo "skip: step 5 discarded, final loss $last"
write_tiny_nml $TEST_DIR/abort.nml name=abort max_steps=10 anomaly=abort inject=4
timeout 60 $MPIRUN -np 1 ./llmtrain $TEST_DIR/abort.nml >$TEST_DIR/abort.log 2>&1
rc=$?
[ $rc -eq 2 ] || fail "abort: exit code $rc, expected 2"
grep -q "step 5: .*not finite" $TEST_DIR/abort.log || fail "abort: no message naming step 5"
echo "abort: exit 2, $(grep 'llmtrain: error' $TEST_DIR/abort.log)"
write_tiny_nml $TEST_DIR/warn.nml name=warn max_steps=6 anomaly=warn inject=4
$MPIRUN -np 1 ./llmtrain $TEST_DIR/warn.nml >$TEST_DIR/warn.log 2>&1 || fail "warn run failed"
grep -q "update applied" $TEST_DIR/warn.log || fail "warn: no warning"
echo "warn: $(grep -m1 'warning' $TEST_DIR/warn.log)"
# an unknown policy name is bad input: exit 2 on a 2-rank run, one message naming the key
write_tiny_nml $TEST_DIR/badpolicy.nml name=badpolicy max_steps=2 "extra_train=on_spike = 'rewind'"
timeout 60 $MPIRUN -np 2 ./llmtrain $TEST_DIR/badpolicy.nml >$TEST_DIR/badpolicy.log 2>&1
rc=$?
[ $rc -eq 2 ] || fail "unknown policy: exit code $rc, expected 2"
grep -q "badpolicy.nml:[0-9]*:[0-9]*: &train on_spike: 'rewind' is not one of '', 'warn', 'skip', 'rollback', 'abort'" $TEST_DIR/badpolicy.log ||
    fail "unknown policy: no message naming &train on_spike: $(cat $TEST_DIR/badpolicy.log)"
echo "bad policy: exit 2, $(grep -m1 'llmtrain: error' $TEST_DIR/badpolicy.log)"
