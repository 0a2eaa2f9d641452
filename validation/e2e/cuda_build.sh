#!/usr/bin/env bash
# The CUDA build compiles where the CUDA toolkit is (no GPU needed): make CUDA=1 cuda-objects
# compiles every src/kernels/cuda/*.cu with nvcc for sm_80 and sm_90, device.c, and every other
# object with -DLLMT_CUDA into build-cuda/ (archive), with zero warnings; build-cuda/llmtrain and
# the GPU check programs link. Then the GPU
# opening llmtrain does for &run device = 'cuda' (build-cuda/gpu/device_probe): without a usable
# GPU (this machine) every rank of 2 exits 2 with one message naming the cause; with one, the GPU
# table. The GPU-free NCCL tests (validation/unit/cuda/test_comm_nccl.c) run on 4 ranks. Skipped (77)
# where nvcc is not installed.
source "$(dirname "$0")/lib.bash"
cuda_home=$(sed -n 's/^CUDA_HOME *= *//p' Makefile.inc)
nvcc="${cuda_home:-/usr/local/cuda}/bin/nvcc"
[ -x "$nvcc" ] || { echo "skipped: no CUDA toolkit ($nvcc not found; Makefile.inc CUDA_HOME)"; exit 77; }
t0=$(date +%s)
make --no-print-directory -j2 CUDA=1 cuda-objects >"$TEST_DIR/build.log" 2>&1 ||
    { grep -E 'error|Error' "$TEST_DIR/build.log" | head -30; fail "make CUDA=1 cuda-objects failed"; }
if grep -n 'warning' "$TEST_DIR/build.log"; then fail "make CUDA=1 cuda-objects: warnings (above)"; fi
n_cu=$(ls src/kernels/cuda/*.cu | wc -l)
for cu in src/kernels/cuda/*.cu; do
    o="build-cuda/kernels/cuda/$(basename "$cu" .cu).o"
    [ -f "$o" ] || fail "$cu: no $o"
    ar t build-cuda/libllmtrain.a | grep -qx "$(basename "$o")" || fail "$o not in build-cuda/libllmtrain.a"
done
echo "make CUDA=1 cuda-objects: $n_cu CUDA file(s) compiled, $(($(date +%s) - t0)) s, no warnings"

# everything the GPU run needs links here: llmtrain with the CUDA backend, the op check
# against the CPU backend, the device probe (an undefined or duplicate symbol fails CI)
for prog in build-cuda/llmtrain build-cuda/gpu/test_cuda_ops build-cuda/gpu/device_probe build-cuda/gpu/check_attn_matmul; do
    make --no-print-directory -j2 CUDA=1 "$prog" >>"$TEST_DIR/build.log" 2>&1 ||
        { tail -20 "$TEST_DIR/build.log"; fail "$prog does not link"; }
done
if grep -n 'warning' "$TEST_DIR/build.log"; then fail "the CUDA link: warnings (above)"; fi
echo "build-cuda/llmtrain and the GPU check programs (test_cuda_ops, device_probe, check_attn_matmul) link"
# the GPU-free parts of NCCL under the data path (validation/unit/cuda/test_comm_nccl.c): the
# unique id over each MPI sub-communicator, NCCL's own words when no GPU can be used
make --no-print-directory -j2 CUDA=1 build-cuda/tests/cuda/test_comm_nccl >>"$TEST_DIR/build.log" 2>&1 ||
    { tail -20 "$TEST_DIR/build.log"; fail "build-cuda/tests/cuda/test_comm_nccl does not build"; }
timeout 120 $MPIRUN -n 4 build-cuda/tests/cuda/test_comm_nccl >"$TEST_DIR/nccl.log" 2>&1 ||
    { cat "$TEST_DIR/nccl.log"; fail "test_comm_nccl on 4 ranks"; }
n=$(grep -c '^\[       OK \]' "$TEST_DIR/nccl.log")
[ "$n" -eq 12 ] || { cat "$TEST_DIR/nccl.log"; fail "test_comm_nccl: $n cases passed over 4 ranks, expected 12"; }
grep '^no GPU: ' "$TEST_DIR/nccl.log" || true
echo "test_comm_nccl: 3 cases on each of 4 ranks passed (NCCL ids over MPI sub-communicators)"
# comm_nccl.c's own logic over a fake NCCL made of MPI (validation/unit/cuda/fake_nccl.c): the
# seam's cases against the MPI path on 3 ranks (a transfer on the wrong direction's communicator
# hangs: the timeout fails it)
make --no-print-directory -j2 CUDA=1 build-cuda/tests/cuda/test_comm_nccl_fake >>"$TEST_DIR/build.log" 2>&1 ||
    { tail -20 "$TEST_DIR/build.log"; fail "build-cuda/tests/cuda/test_comm_nccl_fake does not build"; }
if grep -n 'warning' "$TEST_DIR/build.log"; then fail "the NCCL tests' build: warnings (above)"; fi
timeout 120 $MPIRUN -n 3 build-cuda/tests/cuda/test_comm_nccl_fake >"$TEST_DIR/nccl_fake.log" 2>&1 ||
    { cat "$TEST_DIR/nccl_fake.log"; fail "test_comm_nccl_fake on 3 ranks (exit $?)"; }
n=$(grep -c '^\[       OK \]' "$TEST_DIR/nccl_fake.log")
[ "$n" -eq 27 ] || { cat "$TEST_DIR/nccl_fake.log"; fail "test_comm_nccl_fake: $n cases passed over 3 ranks, expected 27"; }
echo "test_comm_nccl_fake: 9 cases on each of 3 ranks passed (comm_nccl.c over MPI: pieces, roots, lanes, events and their release)"
$MPIRUN -n 2 build-cuda/gpu/device_probe bf16 >"$TEST_DIR/probe.log" 2>&1
rc=$?
cat "$TEST_DIR/probe.log"
if [ "$rc" -eq 0 ]; then
    grep -q '^GPUs (CUDA backend):' "$TEST_DIR/probe.log" || fail "device_probe: exit 0 without the GPU table"
    echo "a GPU is here: the table above"
    exit 0
fi
[ "$rc" -eq 2 ] || fail "device_probe without a usable GPU: exit $rc, expected 2"
n=$(grep -c 'llmtrain: error:' "$TEST_DIR/probe.log")
[ "$n" -eq 1 ] || fail "device_probe: $n error lines, expected one"
grep -qE "&run device = 'cuda': (no NVIDIA driver found|the NVIDIA driver supports CUDA|no CUDA device visible|2 ranks on this node but)" \
    "$TEST_DIR/probe.log" || fail "device_probe: the message does not name the cause"
echo "no usable GPU: one message, exit 2 on every rank"
