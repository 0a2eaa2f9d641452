#!/usr/bin/env bash
# A rank whose experts receive no token does not hang the expert-parallel all-to-all: the tiny
# MoE model of lib_moe.bash starts (&run init_from) from its step-0 weights edited with h5py so
# that in both MoE blocks every token's top-2 are experts 0 and 1 (ln2.b = u, a constant vector;
# router rows 0, 1 = +0.1 u, rows 2, 3 = -0.1 u: since LayerNorm's output is u plus a zero-mean
# vector times ln2.w = 1, z_0 = z_1 = 0.1 |u|^2 = 6.4 = -z_2 = -z_3), dropless (capacity factor
# 0). On dp 2 x ep 2, ep rank 1 holds experts 2 and 3 and gets nothing; on dp 4 x ep 4 ranks 2
# and 3 do. Each run, under `timeout 60`, exits 0, every step's moe<L>_load is [256, 256, 0, 0]
# (8 sequences x 32 tokens x top-2, split evenly between experts 0 and 1: their probabilities
# are equal to ~1e-6 and both are always chosen), and its losses, gradient norms, aux and z
# losses equal one process's from the same weights (tolerances of lib_moe.bash). The serial run,
# with collapse_share = 0.4 and collapse_steps = 3, warns once per block that the router collapses.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash"
t0=$(date +%s.%N)
moe_nml
run_moe base 1 train.max_steps=1
$PYTHON - "$TEST_DIR/base/weights_step000000.h5" "$TEST_DIR/skewed.h5" <<'PY' || fail "editing the weights failed"
import shutil, sys, h5py, numpy as np
sys.path.insert(0, "validation")
from merge_reference import checksum  # io/checkpoint.c's ckpt_tensor_checksum
shutil.copyfile(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    def put(name, x):
        d = f["model/" + name]
        assert d.shape == x.shape, (name, d.shape)
        d[...] = x
        d.attrs["checksum"] = checksum(x)
    for l in (0, 1):
        assert np.all(f["model/h.%d.ln2.w" % l][...] == 1)
        u = np.ones(64, np.float32)
        put("h.%d.ln2.b" % l, u)
        put("h.%d.moe.router.w" % l, np.stack([0.1 * u, 0.1 * u, -0.1 * u, -0.1 * u]).astype(np.float32))
PY
run_moe serial 1 run.init_from="$TEST_DIR/skewed.h5" model.capacity_factor=0 model.collapse_share=0.4 \
    model.collapse_steps=3
# the collapse warning: experts 0 and 1 each take 50% > collapse_share = 0.4, from step 1 on
n=$(grep -c "^moe: WARNING block [01]: one expert has taken 50% of the assignments (more than &model collapse_share = 0.40) for 3 steps in a row, up to step 3" "$TEST_DIR/serial.log")
[ "$n" -eq 2 ] || fail "expected the collapse warning once per MoE block at step 3, got $n (log $TEST_DIR/serial.log)"
echo "collapse warning: once per block at step 3 (collapse_share 0.4, collapse_steps 3)"
moe_header
for g in 2,2 4,4; do
    IFS=, read -r dp ep <<<"$g"
    name=dp${dp}_ep${ep}
    timeout 60 $MPIRUN -np "$dp" ./llmtrain "$TEST_DIR/moe.nml" run.name="$name" "${MOE_KEYS[@]}" \
        model.capacity_factor=0 parallel.dp="$dp" parallel.ep="$ep" run.init_from="$TEST_DIR/skewed.h5" \
        </dev/null >"$TEST_DIR/$name.log" 2>&1
    rc=$?
    [ $rc -ne 124 ] || fail "$name hung: killed by timeout 60 (log $TEST_DIR/$name.log)"
    [ $rc -eq 0 ] || { tail -20 "$TEST_DIR/$name.log"; fail "$name exited $rc"; }
    moe_compare serial "$name"
done
for name in serial dp2_ep2 dp4_ep4; do
    for l in $MOE_LAYERS; do
        got=$(loads "$TEST_DIR/$name/metrics.jsonl" 1 "$l" | sort | uniq -c | sed 's/^ *//')
        [ "$got" = "6 [256,256,0,0]" ] || fail "$name: moe${l}_load is not [256,256,0,0] in all 6 steps: $got"
    done
done
echo "moe0_load = moe1_load = [256,256,0,0] in all 6 steps of serial, dp2_ep2, dp4_ep4 (ranks without tokens)"
echo "PASS ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s)"
