#!/usr/bin/env bash
# The CPU backend says what it runs on and reports honest utilisation:
#  1. the startup summary names the GEMM library and its kernels ("compute: cpu backend, GEMM
#     oneDNN 2.6.3, ISA ..." or "OpenBLAS ..., core ...") and the hardware peak (measured FMA
#     loop) next to the best GEMM rate; every step's metrics carry mfu (of the hardware peak,
#     0 < mfu <= gemm_util), gemm_util (of the measured GEMM rate) and minor_faults;
#  2. no page faults inside a step once the first steps have touched their memory: the minor
#     faults of steps 5-8 add up to under 1% of step 1's (a kernel or op that allocated per step
#     would fault thousands of times each step);
#  3. bf16 with native bf16 products (&train bf16_products = 'native', where the GEMM library has
#     them on this CPU) trains like bf16 with fp32 products of the same rounded values: the first
#     gradient norm within 2e-4 relative (same weights; only the summation order differs, and
#     that flips a few bf16 roundings of activations), 8 steps of losses within 1e-3 and of norms
#     within 1e-2 (those flips compound; measured 1.6e-4 and 3.7e-3; a wrong product, transposed
#     or without its beta, is off by far more), and the summary says which is used; 'auto' says why it chose; on a CPU or library without bf16
#     products 'native' is a one-line note that emulation is used, not an error;
#  4. a Makefile.inc that names a GEMM library that is not there stops the build with a message
#     naming the variable to set (GEMM = cblas with a missing BLAS_LIBS; GEMM = onednn with a
#     library that is not there; an unknown GEMM).
source "$(dirname "$0")/lib.bash"
nml() { # name precision bf16_products max_steps
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 11 /
&model n_layer = 2, n_head = 4, d_model = 128, d_ff = 512, vocab_size = 500, seq_len = 64 /
&train max_steps = $4, micro_batch = 4, global_batch = 4, lr = 3e-3, warmup_steps = 2,
       precision = '$2', bf16_products = '$3' /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false. /
&log every = 1 /
NML
}
run() { OMP_NUM_THREADS=2 timeout 300 $MPIRUN -np 1 --bind-to none ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 ||
    { tail "$TEST_DIR/$1.log"; fail "$1 failed"; }; }

echo "== 1-2. summary, utilisation fields, page faults per step"
nml fp32 fp32 auto 8 && run fp32
grep -E "^compute: cpu backend, GEMM (oneDNN [0-9.]+, ISA [a-z0-9_]+|OpenBLAS [0-9.]+, core [A-Za-z0-9]+|CBLAS)" "$TEST_DIR/fp32.log" ||
    fail "no 'compute: cpu backend, GEMM <library and kernels>' line"
grep -E "^MFU reference: hardware peak [0-9.]+ GFLOP/s per rank \(.*\); best GEMM [0-9.]+ GFLOP/s" "$TEST_DIR/fp32.log" ||
    fail "no hardware peak / best GEMM line"
$PYTHON - "$TEST_DIR/fp32/metrics.jsonl" <<'PY' || fail "utilisation fields or page faults"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 8, len(rows)
for r in rows:
    assert 0 < r["mfu"] <= r["gemm_util"] + 1e-9, (r["step"], r["mfu"], r["gemm_util"])
faults = [r["minor_faults"] for r in rows]
late = sum(faults[4:])
print("minor faults per step:", faults, "- steps 5-8: %d (%.2f%% of step 1)" % (late, 100.0 * late / faults[0]))
sys.exit(0 if faults[0] > 0 and late < 0.01 * faults[0] else 1)
PY

echo "== 3. bf16: native bf16 products vs fp32 products of the same values"
nml bf16_native bf16 native 8 && run bf16_native
nml bf16_emulated bf16 emulated 8 && run bf16_emulated
nml bf16_auto bf16 auto 2 && run bf16_auto
grep -E "^precision: bf16 products emulated: fp32 products of the rounded values( \(no native products of this type here\))?$" "$TEST_DIR/bf16_emulated.log" ||
    fail "'emulated' not said"
grep -E "^precision: bf16 products .*bf16_products = 'auto': the GEMM library's bf16 kernels are (not )?faster than its fp32 ones on this CPU" "$TEST_DIR/bf16_auto.log" ||
    grep -q "^precision: bf16 products emulated: .*no native products of this type here" "$TEST_DIR/bf16_auto.log" ||
    fail "'auto' does not say what it measured"
if grep -q "^precision: bf16 products native" "$TEST_DIR/bf16_native.log"; then
    same_series loss 1e-3 <(losses "$TEST_DIR/bf16_native/metrics.jsonl") <(losses "$TEST_DIR/bf16_emulated/metrics.jsonl") ||
        fail "native bf16 products: losses differ from the fp32 products of the same values"
    same_series "step-1 grad_norm" 2e-4 <(norms "$TEST_DIR/bf16_native/metrics.jsonl" | head -1) <(norms "$TEST_DIR/bf16_emulated/metrics.jsonl" | head -1) ||
        fail "native bf16 products: the first gradient norm differs"
    same_series grad_norm 1e-2 <(norms "$TEST_DIR/bf16_native/metrics.jsonl") <(norms "$TEST_DIR/bf16_emulated/metrics.jsonl") ||
        fail "native bf16 products: gradient norms differ"
    cmp -s <(losses "$TEST_DIR/bf16_native/metrics.jsonl") <(losses "$TEST_DIR/fp32/metrics.jsonl") &&
        fail "bf16 losses equal fp32's: nothing was rounded"
else
    grep -q "^precision: bf16 products emulated: .*no native products of this type here" "$TEST_DIR/bf16_native.log" ||
        fail "'native' without bf16 products here: no one-line note"
    echo "no native bf16 products on this CPU/library: 'native' emulates, as the note says"
fi

echo "== 4. a GEMM library that is not there"
out=$(make -n GEMM=cblas BLAS_CFLAGS= BLAS_LIBS=-lno_such_blas 2>&1); echo "$out" | tail -1
echo "$out" | grep -q "GEMM = cblas, but <cblas.h> with -lno_such_blas does not build: set BLAS_CFLAGS and BLAS_LIBS" || fail "missing CBLAS not named"
out=$(make -n GEMM=onednn DNNL_LIBS=-lno_such_dnnl 2>&1); echo "$out" | tail -1
echo "$out" | grep -q "GEMM = onednn, but <oneapi/dnnl/dnnl.h> .* does not build: .*set DNNL_ROOT" || fail "missing oneDNN not named"
out=$(make -n GEMM=mkl 2>&1); echo "$out" | tail -1
echo "$out" | grep -q "GEMM = 'mkl': use onednn or cblas" || fail "unknown GEMM not refused"
echo "cpu_backend: all checks passed"
