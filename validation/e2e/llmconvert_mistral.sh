#!/usr/bin/env bash
# llmconvert with Mistral (MistralForCausalLM, max_position_embeddings 64, sliding_window 32) <->
# &model arch = 'llama' with sliding_window = 32: llmtrain's attention is full causal attention,
# which is Mistral's while seq_len <= sliding_window, so the import's seq_len is 32 and a longer
# one is refused. lib_llmconvert.bash's family_check against transformers 4.36.2's Mistral; the
# export is a MistralForCausalLM with its window; llmtrain with seq_len 64 is refused naming
# seq_len and sliding_window (exit 2); a head_dim other than hidden_size / heads (Mistral NeMo's)
# is one message naming it; a window of null imports as a plain Llama.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_llmconvert.bash" # family_check, refused, bad_hf
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
deps="import onnx, onnxruntime, safetensors, h5py, torch, transformers" # onnx before torch: see llmconvert_gpt2.sh
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -x build/ref/logits_dump ] && [ -x ./llmconvert ] || fail "build/ref/logits_dump or ./llmconvert missing (make tests)"
D=$TEST_DIR
family_check mistral "sliding_window = 32" "model.n_kv_head=2"
grep -q '"model_type": "mistral"' "$D/hf_out/config.json" && grep -q '"sliding_window": 32' "$D/hf_out/config.json" ||
    fail "the exported config.json is not a MistralForCausalLM with sliding_window 32"
grep -q "seq_len = 32" "$D/imp.nml" || fail "the import's seq_len is not the window's 32"
$MPIRUN -np 1 ./llmtrain "$D/eval1.nml" model.seq_len=64 >"$D/long.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep "error:" "$D/long.log" | grep "seq_len = 64" | grep -q "sliding_window = 32" ||
    { cat "$D/long.log"; fail "seq_len 64 > sliding_window 32: exit $rc, not the refusal naming both"; }
grep -m1 "error:" "$D/long.log"
bad_hf bad_hd 'c["head_dim"] = 32'
refused bad_hd head_dim --to hdf5 "$D/bad_hd" "$D/x.h5"
bad_hf nowin 'c["sliding_window"] = None'
./llmconvert --to hdf5 "$D/nowin" "$D/nowin.h5" >/dev/null && grep -q "seq_len = 64" "$D/nowin.nml" &&
    ! grep -q sliding_window "$D/nowin.nml" || fail "a Mistral without a window did not import as seq_len 64"
echo "llmconvert_mistral: all checks passed"
