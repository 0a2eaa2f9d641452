#!/usr/bin/env bash
# The communication seam's unit tests (validation/unit/test_comm_seam.c) under 3 MPI ranks: every
# data-path call through a device transport (a host one, written in the test) equals the same call
# by MPI, with uneven pieces (one rank holding none), a ring of sends and receives, all-to-all rows.
source "$(dirname "$0")/lib.bash"
[ -x build/tests/test_comm_seam ] || fail "build/tests/test_comm_seam is not built (make tests)"
timeout 120 $MPIRUN -np 3 build/tests/test_comm_seam >$TEST_DIR/out.log 2>&1
rc=$?
grep -E "PASSED|FAILED" $TEST_DIR/out.log | sort | uniq -c
[ "$rc" -eq 0 ] || { cat $TEST_DIR/out.log; fail "test_comm_seam failed under 3 ranks (exit $rc)"; }
n=$(grep -c '^\[       OK \]' $TEST_DIR/out.log)
[ "$n" -eq 24 ] || fail "$n cases passed over the 3 ranks, expected 8 on each (24)"
