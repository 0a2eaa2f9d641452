#!/usr/bin/env bash
# Chunked MPI calls (parallel/comm.h, comm_max_count) under 2 and 4 ranks: the unit tests of
# validation/unit/test_comm_chunks.c (every chunked collective and point-to-point transfer, the
# chunk size lowered to 7 elements by LLMT_COMM_MAX_COUNT, bit-identical to one MPI call).
source "$(dirname "$0")/lib.bash"
[ -x build/tests/test_comm_chunks ] || fail "build/tests/test_comm_chunks is not built (make tests)"
for np in 2 4; do
    LLMT_COMM_MAX_COUNT=7 timeout 120 $MPIRUN -np $np build/tests/test_comm_chunks >$TEST_DIR/out$np.log 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || { cat $TEST_DIR/out$np.log; fail "test_comm_chunks failed under $np ranks (exit $rc)"; }
    n=$(grep -c '^\[       OK \]' $TEST_DIR/out$np.log)
    [ "$n" -eq $((8 * np)) ] || fail "$n cases passed over the $np ranks, expected 8 on each ($((8 * np)))"
    echo "$np ranks: $n cases passed"
done
echo "chunked collectives equal one MPI call on 2 and 4 ranks"
