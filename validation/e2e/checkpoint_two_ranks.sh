#!/usr/bin/env bash
# The HDF5 weights unit tests again under 2 MPI ranks: tp = 2 shards written collectively and read
# back as whole tensors on tp = 1 (and the reverse), replicas writing empty selections.
source "$(dirname "$0")/lib.bash"
timeout 300 $MPIRUN -np 2 build/tests/test_checkpoint 2>&1 | tee $TEST_DIR/out.log | grep -E "PASSED|FAILED"
[ "${PIPESTATUS[0]}" -eq 0 ] || { cat $TEST_DIR/out.log; fail "test_checkpoint failed under 2 ranks"; }
