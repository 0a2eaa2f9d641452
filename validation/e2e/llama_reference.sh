#!/usr/bin/env bash
# The Llama-family options against an independent PyTorch model (validation/reference/
# llama_reference.py, float64): a tiny random Llama (2 layers, d_model 64, 4 heads, 2 kv heads,
# RoPE, RMSNorm, SwiGLU, untied head, no biases) from llmtrain's own initial weights (gpt_dump's
# HDF5) and the same batches: step-0 loss rel. <= 1e-5, every gradient rel. L2 <= 1e-4, losses and
# gradient norms of 10 AdamW steps rel. <= 1e-4; the tensor names are docs/model.md's table. Then the
# switches mixed with GPT-2's pieces (learned positions off, layernorm and biases kept, tied head,
# one kv head) the same way, and the real training path's step-0 gradients (&train
# dump_grads_step = 0) on tp 2 x pp 2 (kv heads split) and tp 4 (2 kv heads replicated over 4
# ranks) against the same reference.
source "$(dirname "$0")/lib.bash"

# llama_nml PATH MODEL_KEYS [write_tiny_nml key=value ...]
llama_nml() {
    local path=$1 keys=$2; shift 2
    write_tiny_nml "$path" "$@"
    sed -i "s/seq_len = 32/seq_len = 32, $keys/" "$path"
}

# check NAME NML: dump, train serially, compare with PyTorch
check() {
    mkdir -p "$TEST_DIR/$1.dump"
    build/ref/gpt_dump "$2" "$TEST_DIR/$1.dump" >/dev/null || fail "$1: gpt_dump failed"
    $MPIRUN -np 1 ./llmtrain "$2" >"$TEST_DIR/$1.log" 2>&1 || { tail "$TEST_DIR/$1.log"; fail "$1: llmtrain failed"; }
    h5diff "$TEST_DIR/$1.dump/weights.h5" "$TEST_DIR/$1/weights_step000000.h5" /model /model ||
        fail "$1: llmtrain's step-0 weights differ from the dumped ones"
    $PYTHON validation/reference/llama_reference.py --nml "$2" --dump "$TEST_DIR/$1.dump" \
        --metrics "$TEST_DIR/$1/metrics.jsonl" || fail "$1: differs from the PyTorch reference"
}

echo "== llama: rmsnorm, rope, swiglu, 2 kv heads of 4, untied, no bias"
llama_nml "$TEST_DIR/llama.nml" "arch = 'llama', n_kv_head = 2" name=llama max_steps=10 warmup=3 val_every=0
check llama "$TEST_DIR/llama.nml"

echo "== mixed: gpt2 with rope, swiglu, 1 kv head (layernorm, biases, tied head kept)"
llama_nml "$TEST_DIR/mixed.nml" "pos = 'rope', mlp = 'swiglu', n_kv_head = 1, rope_theta = 500" \
    name=mixed max_steps=4 warmup=2 val_every=0
check mixed "$TEST_DIR/mixed.nml"

# grid NAME GRID: step-0 gradients of the training path on GRID against the serial reference
grid() {
    local nml=$TEST_DIR/$1.nml
    llama_nml "$nml" "arch = 'llama', n_kv_head = 2" name="$1" max_steps=1 warmup=3 val_every=0 mb=2 gb=8 \
        "dp=$2" extra_train="dump_grads_step = 0"
    $MPIRUN -np 4 ./llmtrain "$nml" >"$TEST_DIR/$1.log" 2>&1 || { tail -20 "$TEST_DIR/$1.log"; fail "$1 failed"; }
    step0_dump "$TEST_DIR/$1" "$TEST_DIR/$1.dump"
    h5diff "$TEST_DIR/llama.dump/weights.h5" "$TEST_DIR/$1.dump/weights.h5" /model /model ||
        fail "$1: step-0 weights differ from the serial ones"
    $PYTHON validation/reference/llama_reference.py --nml "$TEST_DIR/llama.nml" --dump "$TEST_DIR/$1.dump" ||
        fail "$1: the training path differs from the PyTorch reference"
}
echo "== training path on tp 2 x pp 2 (kv heads split)"
grid tp2pp2 "1, tp = 2, pp = 2"
echo "== training path on tp 4 (2 kv heads replicated over 4 ranks)"
grid tp4 "1, tp = 4"
echo "PASS"
