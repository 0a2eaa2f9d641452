#!/usr/bin/env bash
# Mixture-of-Experts against an independent PyTorch model (validation/reference/moe_reference.py,
# float64, written from the MoE semantics docs/model.md documents). First the reference's own
# self-test (identical experts = the dense MLP, gradcheck, hand-made capacity cases). Then three
# tiny MoE models from llmtrain's own initial weights (gpt_dump's HDF5) and the same batches, 2
# micro-batches per step (aux and z-loss are per micro-batch): tensor names and 3-D expert shapes,
# step-0 cross-entropy rel. <= 1e-5, every step-0 gradient of the objective (cross-entropy + aux +
# z-loss) rel. L2 <= 1e-4, and over 6 AdamW steps the losses, gradient norms and MoE metrics
# (moe_aux_loss, moe_z_loss, per layer aux, z, entropy, drop fraction, cv) rel. <= 1e-4, the
# per-expert loads exactly:
#   probs:    GPT-2, 4 experts, top-2, capacity 1.0, drop by router probability
#   position: GPT-2, top-1, capacity 1.0, drop by position, MoE every 2nd block, 1 shared expert,
#             MLP router, larger aux and z coefficients
#   llama:    Llama (SwiGLU experts, no biases), 4 experts, top-2, dropless, d_ff_expert 32
# A run that refuses the MoE keys fails the test (it does not skip).
source "$(dirname "$0")/lib.bash"

$PYTHON validation/reference/moe_reference.py --selftest || fail "the PyTorch reference's self-test failed"

# moe_nml PATH MODEL_KEYS [write_tiny_nml key=value ...]: MODEL_KEYS (newlines allowed) added to &model
moe_nml() {
    local path=$1 keys=${2//$'\n'/ }; shift 2
    write_tiny_nml "$path" "$@"
    sed -i "s/seq_len = 32/seq_len = 32, $keys/" "$path"
}

# check NAME MODEL_KEYS: dump, train serially, compare with PyTorch
check() {
    local nml=$TEST_DIR/$1.nml
    moe_nml "$nml" "$2" name="$1" max_steps=6 warmup=2 val_every=0 mb=4 gb=8
    mkdir -p "$TEST_DIR/$1.dump"
    build/ref/gpt_dump "$nml" "$TEST_DIR/$1.dump" >"$TEST_DIR/$1.dump.log" 2>&1 ||
        { tail -5 "$TEST_DIR/$1.dump.log"; fail "$1: gpt_dump failed on the MoE keys ($2)"; }
    $MPIRUN -np 1 ./llmtrain "$nml" >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -5 "$TEST_DIR/$1.log"; fail "$1: llmtrain failed on the MoE keys ($2)"; }
    h5diff "$TEST_DIR/$1.dump/weights.h5" "$TEST_DIR/$1/weights_step000000.h5" /model /model ||
        fail "$1: llmtrain's step-0 weights differ from the dumped ones"
    $PYTHON validation/reference/moe_reference.py --nml "$nml" --dump "$TEST_DIR/$1.dump" \
        --metrics "$TEST_DIR/$1/metrics.jsonl" || fail "$1: differs from the PyTorch reference"
}

echo "== probs: gpt2, 4 experts, top-2, capacity 1.0, drop by probability"
check probs "n_experts = 4, top_k = 2, capacity_factor = 1.0, drop_policy = 'probs',
    aux_loss_coef = 0.01, z_loss_coef = 0.001"
echo "== position: gpt2, top-1, capacity 1.0, drop by position, every 2nd block, 1 shared expert, mlp router"
check position "n_experts = 4, top_k = 1, capacity_factor = 1.0, drop_policy = 'position',
    moe_every = 2, n_shared_experts = 1, router = 'mlp', aux_loss_coef = 0.1, z_loss_coef = 0.01"
echo "== llama: swiglu experts, no biases, 4 experts, top-2, dropless, d_ff_expert 32"
check llama "arch = 'llama', n_experts = 4, top_k = 2, capacity_factor = 0, d_ff_expert = 32"
echo "PASS"
