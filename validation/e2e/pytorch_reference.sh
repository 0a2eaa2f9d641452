#!/usr/bin/env bash
# PyTorch reference (float64, independent code): same initial weights (read from llmtrain's HDF5)
# and the same batches give the step-0 loss (rel. <= 1e-5), every step-0 gradient (rel. L2 <=
# 1e-4) and the losses of 10 AdamW steps with clipping, warmup+cosine LR and accumulation
# (rel. <= 1e-4), and their gradient norms (rel. <= 1e-4). Also: llmtrain's own step-0 weights
# file equals the dumped one, bit for bit. Then the same step-0 loss and gradients through the real
# training path on a (dp 2, tp 2, pp 2) grid with accumulation 2: llmtrain's &train
# dump_grads_step = 0 writes the gradients the optimizer sees (1F1B schedule over the
# micro-batches, dp all-reduce, tied embedding summed), in global shapes, and the same PyTorch
# reference checks them.
source "$(dirname "$0")/lib.bash"
nml=$TEST_DIR/ref.nml
write_tiny_nml "$nml" name=ref max_steps=10 warmup=3 val_every=0
mkdir -p "$TEST_DIR/dump"
build/ref/gpt_dump "$nml" "$TEST_DIR/dump" || fail "gpt_dump failed"
$MPIRUN -np 1 ./llmtrain "$nml" >"$TEST_DIR/train.log" 2>&1 || { cat "$TEST_DIR/train.log"; fail "llmtrain failed"; }
h5diff "$TEST_DIR/dump/weights.h5" "$TEST_DIR/ref/weights_step000000.h5" /model /model ||
    fail "llmtrain's step-0 weights differ from the dumped ones"
$PYTHON validation/reference/gpt_reference.py --nml "$nml" --dump "$TEST_DIR/dump" \
    --metrics "$TEST_DIR/ref/metrics.jsonl" || fail "serial run differs from the PyTorch reference"

echo "== the real training path on dp 2 x tp 2 x pp 2 (8 ranks), 2 micro-batches per rank"
nml3=$TEST_DIR/grid.nml
write_tiny_nml "$nml3" name=grid max_steps=1 warmup=3 val_every=0 mb=2 gb=8 "dp=2, tp = 2, pp = 2" \
    extra_train="dump_grads_step = 0"
$MPIRUN -np 8 ./llmtrain "$nml3" >"$TEST_DIR/grid.log" 2>&1 || { tail -20 "$TEST_DIR/grid.log"; fail "llmtrain on (2,2,2) failed"; }
step0_dump "$TEST_DIR/grid" "$TEST_DIR/grid_dump"
h5diff "$TEST_DIR/dump/weights.h5" "$TEST_DIR/grid_dump/weights.h5" /model /model ||
    fail "the (2,2,2) run's step-0 weights differ from the serial ones"
$PYTHON validation/reference/gpt_reference.py --nml "$nml" --dump "$TEST_DIR/grid_dump" ||
    fail "the (2,2,2) training path differs from the PyTorch reference"
