#!/usr/bin/env bash
# llmconvert with Qwen 2 (Qwen2ForCausalLM: biases on q_proj, k_proj, v_proj only) <-> &model
# qkv_bias = .true.: lib_llmconvert.bash's family_check against transformers 4.36.2's Llama with
# attention_bias and o_proj's bias held at zero (validation/reference/hf_newer.py: Qwen2Attention
# of transformers 4.37 is that); the trained run exported is a Qwen2ForCausalLM; then
# use_sliding_window = true is one message naming the field, exit 2.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_llmconvert.bash" # family_check, refused, bad_hf
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
deps="import onnx, onnxruntime, safetensors, h5py, torch, transformers" # onnx before torch: see llmconvert_gpt2.sh
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -x build/ref/logits_dump ] && [ -x ./llmconvert ] || fail "build/ref/logits_dump or ./llmconvert missing (make tests)"
D=$TEST_DIR
family_check qwen2 "qkv_bias = .true." "model.n_kv_head=4"
grep -q '"model_type": "qwen2"' "$D/hf_out/config.json" && grep -q '"num_key_value_heads": 4' "$D/hf_out/config.json" ||
    fail "the exported config.json is not the trained run's Qwen2ForCausalLM"
bad_hf bad_sw 'c["use_sliding_window"] = True'
refused bad_sw use_sliding_window --to hdf5 "$D/bad_sw" "$D/x.h5"
echo "llmconvert_qwen2: all checks passed"
