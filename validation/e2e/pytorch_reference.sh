#!/usr/bin/env bash
# PyTorch reference (float64, independent code): same initial weights (read from llmtrain's HDF5)
# and the same batches give the step-0 loss (rel. <= 1e-5), every step-0 gradient (rel. L2 <=
# 1e-4) and the losses of 10 AdamW steps with clipping, warmup+cosine LR and accumulation
# (rel. <= 1e-4). Also: llmtrain's own step-0 weights file equals the dumped one, bit for bit.
source "$(dirname "$0")/lib.bash"
nml=$TEST_DIR/ref.nml
write_tiny_nml "$nml" name=ref max_steps=10 warmup=3 val_every=0
mkdir -p "$TEST_DIR/dump"
build/ref/gpt_dump "$nml" "$TEST_DIR/dump" || fail "gpt_dump failed"
$MPIRUN -np 1 ./llmtrain "$nml" >"$TEST_DIR/train.log" 2>&1 || { cat "$TEST_DIR/train.log"; fail "llmtrain failed"; }
h5diff "$TEST_DIR/dump/weights.h5" "$TEST_DIR/ref/weights_step000000.h5" /model /model ||
    fail "llmtrain's step-0 weights differ from the dumped ones"
$PYTHON validation/reference/gpt_reference.py --nml "$nml" --dump "$TEST_DIR/dump" \
    --metrics "$TEST_DIR/ref/metrics.jsonl"
