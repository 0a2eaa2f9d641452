#!/usr/bin/env bash
# The worked example inputs/examples/continue_pretraining.sh (docs/llmconvert.md, "Continue
# pretraining a Llama-style model from Hugging Face weights on your text") run as a user runs it,
# on docs/*.md: every step exits 0; then its results are checked against independent references:
# the converted tokenizer (tiktoken file) and the exported tokenizer.json give the same ids
# (tiktoken vs transformers, fast and slow); the 20 steps lowered the validation loss below the
# random model's ln(vocab) - 0.3; the exported directory's logits (transformers) equal llmtrain's
# on the trained weights (1e-5 x max(1, max |logit|)).
source "$(dirname "$0")/lib.bash"
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
deps="import tokenizers, tiktoken, safetensors, h5py, torch, transformers"
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -x ./llmprep ] && [ -x ./llmconvert ] && [ -x build/ref/logits_dump ] || fail "llmprep, llmconvert or build/ref/logits_dump missing (make tests)"
W=$TEST_DIR/w
PYTHON=$PYTHON MPIRUN="$MPIRUN" bash inputs/examples/continue_pretraining.sh "$W" docs/*.md >"$TEST_DIR/example.log" 2>&1 ||
    { tail -20 "$TEST_DIR/example.log"; fail "the example failed"; }
grep -E "^== |^llmconvert: .* -> |val_loss|ForCausalLM ->|done" "$TEST_DIR/example.log"
v=$(grep -o '"val_loss":[0-9.]*' "$W/cpt/metrics.jsonl" | tail -1 | cut -d: -f2)
awk -v v="$v" 'BEGIN { lim = log(513) - 0.3; printf "validation loss after 20 steps %s (random model ln(513) = %.3f; limit %.3f)\n", v, log(513), lim; exit !(v != "" && v < lim) }' ||
    fail "continued pretraining did not lower the validation loss"
CHECK="$PYTHON validation/e2e/llmconvert_check.py"
sed "s|init_from = '[^']*'|init_from = '$W/cpt/weights_step000020.h5'|" "$W/cpt.nml" >"$TEST_DIR/eval.nml"
$CHECK ids "$TEST_DIR/b.ids" 2 32 513 7 || fail "ids"
build/ref/logits_dump "$TEST_DIR/eval.nml" "$TEST_DIR/b.ids" 2 32 "$TEST_DIR/b.lt.f32" >/dev/null || fail "logits_dump failed"
$CHECK hf-logits "$W/hf_out" "$TEST_DIR/b.ids" 2 32 "$TEST_DIR/b.hf.f32" \
    + compare "logits [2, 32] of the continued model, transformers on the export vs llmtrain" "$TEST_DIR/b.lt.f32" "$TEST_DIR/b.hf.f32" 1e-5 \
    + tokenizer "$W/hf_out" "$W/base.tiktoken" || fail "a reference check failed"
echo "continue_pretraining_example: all checks passed"
