#!/usr/bin/env bash
# llmconvert with Llama 3.1 (LlamaForCausalLM with rope_scaling {"rope_type": "llama3", factor 8,
# low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 64}: at head size 16 and
# rope_theta 5e5 the 8 frequencies fall in all three bands) <-> &model rope_scaling = 'llama3':
# lib_llmconvert.bash's family_check against transformers 4.36.2's Llama with the llama3
# frequencies of validation/reference/hf_newer.py (written from transformers 4.43's
# _compute_llama3_parameters); then a rope_scaling of another type is one message naming the
# field, exit 2.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_llmconvert.bash" # family_check, refused, bad_hf
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
deps="import onnx, onnxruntime, safetensors, h5py, torch, transformers" # onnx before torch: see llmconvert_gpt2.sh
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -x build/ref/logits_dump ] && [ -x ./llmconvert ] || fail "build/ref/logits_dump or ./llmconvert missing (make tests)"
D=$TEST_DIR
family_check llama3 "rope_scaling = 'llama3', rope_scaling_factor = 8.0, rope_low_freq_factor = 1.0," \
    "model.tie_embeddings=.true. model.n_kv_head=1"
grep -q '"rope_type": "llama3"' "$D/hf_out/config.json" && grep -q '"original_max_position_embeddings": 64' "$D/hf_out/config.json" ||
    fail "the exported config.json lacks Llama 3.1's rope_scaling"
bad_hf bad_scaling 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
refused bad_scaling rope_scaling --to hdf5 "$D/bad_scaling" "$D/x.h5"
bad_hf bad_hi 'c["rope_scaling"]["high_freq_factor"] = 0.5'
refused bad_hi high_freq_factor --to hdf5 "$D/bad_hi" "$D/x.h5"
echo "llmconvert_llama3: all checks passed"
