#!/usr/bin/env bash
# Data parallel: dp = 2 (micro_batch 4, no accumulation) and dp = 1 (micro_batch 4, 2
# accumulation steps) train on the same global batch of 8 and give the same losses and gradient
# norms (before clipping) within 1e-5 relative over 10 steps, and every final parameter within 1e-4 (absolute; parameters are
# O(0.01-1), and AdamW turns last-bit differences of tiny gradients into ~1e-5 moves).
source "$(dirname "$0")/lib.bash"
write_tiny_nml $TEST_DIR/serial.nml name=serial max_steps=10 dp=1 mb=4 gb=8
write_tiny_nml $TEST_DIR/dp2.nml name=dp2 max_steps=10 dp=2 mb=4 gb=8
$MPIRUN -np 1 ./llmtrain $TEST_DIR/serial.nml >$TEST_DIR/serial.log 2>&1 || fail "serial run failed"
$MPIRUN -np 2 ./llmtrain $TEST_DIR/dp2.nml >$TEST_DIR/dp2.log 2>&1 || { cat $TEST_DIR/dp2.log; fail "dp2 run failed"; }
paste <(losses $TEST_DIR/serial/metrics.jsonl) <(losses $TEST_DIR/dp2/metrics.jsonl) |
    awk '{e = ($1 - $2) / $1; if (e < 0) e = -e; printf "step %2d serial %.7f dp2 %.7f rel %.1e\n", NR, $1, $2, e; if (e > 1e-5) bad = 1} END {exit bad}' ||
    fail "losses differ by more than 1e-5"
same_series "gradient norms, serial vs dp2" 1e-5 <(norms $TEST_DIR/serial/metrics.jsonl) <(norms $TEST_DIR/dp2/metrics.jsonl) ||
    fail "gradient norms differ by more than 1e-5"
$PYTHON validation/compare_weights.py --atol 1e-4 $TEST_DIR/serial/weights_step000010.h5 $TEST_DIR/dp2/weights_step000010.h5 ||
    fail "final weights differ by more than 1e-4 relative"
