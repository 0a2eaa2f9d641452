#!/usr/bin/env bash
# The companion tools on Mixture-of-Experts weights: llmmerge merges the 3-D expert tensors
# [n_experts, rows, cols] element by element like any other (a 50/50 linear merge of two weight
# files equals their mean, shape kept, within 1e-7, checked with h5py), the merged file starts a
# run (&run init_from), and llmconvert refuses to export an MoE model with a message that says so
# (exit != 0) instead of a misleading one.
source "$(dirname "$0")/lib.bash"

nml=$TEST_DIR/moe.nml
write_tiny_nml "$nml" name=moe max_steps=4 val_every=0
sed -i "s/seq_len = 32/seq_len = 32, n_experts = 4, top_k = 2, d_ff_expert = 32/" "$nml"
$MPIRUN -np 1 ./llmtrain "$nml" >"$TEST_DIR/train.log" 2>&1 || { tail "$TEST_DIR/train.log"; fail "training failed"; }
w0=$TEST_DIR/moe/weights_step000000.h5 w4=$TEST_DIR/moe/weights_step000004.h5
cat >"$TEST_DIR/merge.nml" <<NML
&merge
  method = 'linear', models = '$w0', '$w4', weights = 0.5, 0.5
  out = '$TEST_DIR/merged.h5'
/
NML
$MPIRUN -np 1 ./llmmerge "$TEST_DIR/merge.nml" >"$TEST_DIR/merge.log" 2>&1 || { cat "$TEST_DIR/merge.log"; fail "llmmerge failed"; }
$PYTHON - "$w0" "$w4" "$TEST_DIR/merged.h5" <<'PY' || fail "the merged expert tensors are not the mean"
import sys, h5py, numpy as np
a, b, m = (h5py.File(p, "r")["model"] for p in sys.argv[1:])
worst, n3 = 0.0, 0
for name in a:
    want = 0.5 * (a[name][...].astype(np.float64) + b[name][...])
    got = m[name][...]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    n3 += got.ndim == 3
    worst = max(worst, float(np.abs(got - want).max()))
print("merged %d tensors (%d of them 3-D expert tensors), worst |merged - mean| %.2e" % (len(a), n3, worst))
sys.exit(0 if n3 == 4 and worst <= 1e-7 else 1)
PY
write_tiny_nml "$TEST_DIR/from.nml" name=from max_steps=2 val_every=0 init_from="$TEST_DIR/merged.h5"
sed -i "s/seq_len = 32/seq_len = 32, n_experts = 4, top_k = 2, d_ff_expert = 32/" "$TEST_DIR/from.nml"
$MPIRUN -np 1 ./llmtrain "$TEST_DIR/from.nml" >"$TEST_DIR/from.log" 2>&1 || { tail "$TEST_DIR/from.log"; fail "training from the merged weights failed"; }
out=$(PYTHONPATH=.deps/python $PYTHON src/tools/llmconvert.py --to hf "$w4" "$TEST_DIR/hf" 2>&1) &&
    fail "llmconvert exported an MoE model: $out"
echo "$out" | grep -q "a Mixture-of-Experts model (&model n_experts = 4)" || fail "llmconvert's message: $out"
echo "llmconvert: $out"
echo "PASS"
