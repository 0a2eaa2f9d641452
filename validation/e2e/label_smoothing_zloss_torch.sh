#!/usr/bin/env bash
# Label smoothing and z-loss against PyTorch (float64): llmtrain's vocab-parallel cross-entropy
# pieces (tp = 1, 2, 4 vocabulary shards of a padded vocabulary, V = 300 of 384) give per-row
# losses equal to torch.nn.functional.cross_entropy(label_smoothing = e) within 1e-5 relative,
# z-loss = coef * logsumexp^2 within 1e-5, and the gradient of mean(loss + z-loss) equal to
# autograd's within 1e-5 of its largest element, padding columns exactly 0
# (validation/reference/xent_reg_reference.py). Then a training run with both on writes a
# finite "z_loss" in every step record and its loss falls.
source "$(dirname "$0")/lib.bash"
$PYTHON -c 'import torch' 2>/dev/null || { echo "skip: PyTorch is not installed for $PYTHON"; exit 77; }
[ -x build/ref/xent_reg_dump ] || make -s build/ref/xent_reg_dump >/dev/null || fail "cannot build xent_reg_dump"
$PYTHON validation/reference/xent_reg_reference.py build/ref/xent_reg_dump "$TEST_DIR" ||
    fail "label smoothing / z-loss differ from PyTorch"
nml=$TEST_DIR/zl.nml
write_tiny_nml "$nml" name=zl max_steps=30 val_every=0 extra_train="label_smoothing = 0.1, z_loss = 1e-3"
$MPIRUN -np 1 ./llmtrain "$nml" >"$TEST_DIR/zl.log" 2>&1 || { tail -20 "$TEST_DIR/zl.log"; fail "training with label smoothing and z-loss failed"; }
grep -o '"z_loss":[^,}]*' "$TEST_DIR/zl/metrics.jsonl" | cut -d: -f2 >"$TEST_DIR/z.txt"
[ "$(wc -l <"$TEST_DIR/z.txt")" = 30 ] || fail "not every step record has z_loss"
awk '!($1 > 0 && $1 < 1) {exit 1}' "$TEST_DIR/z.txt" || fail "a z_loss is not in (0, 1): $(sort -g "$TEST_DIR/z.txt" | tail -1)"
first=$(losses "$TEST_DIR/zl/metrics.jsonl" | head -1) last=$(losses "$TEST_DIR/zl/metrics.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a - 0.5)}' || fail "loss did not fall: $first -> $last"
echo "training with label_smoothing 0.1, z_loss 1e-3: loss $first -> $last, z_loss $(head -1 "$TEST_DIR/z.txt") -> $(tail -1 "$TEST_DIR/z.txt")"
