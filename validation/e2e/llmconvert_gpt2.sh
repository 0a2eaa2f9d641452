#!/usr/bin/env bash
# llmconvert with GPT-2 against the real transformers 4.36.2 and onnxruntime (PyPI, .deps/python):
#  1. HF -> llmtrain: a random GPT2LMHeadModel (every tensor perturbed, biases and norms too) is
#     imported; llmtrain's mode = 'eval' loss on the tiny validation windows equals transformers'
#     (rel. 1e-5) on 1 rank and on tp = 2 (the file loads on any grid); llmtrain's logits (the
#     library's forward on the init_from weights, build/ref/logits_dump) equal transformers' to
#     1e-5 x max(1, max |logit|) for (B, T) = (3, 17) and (2, 32).
#  2. bf16 and fp16 checkpoints import as torch's rounding of the fp32 model, widened exactly.
#     Round trips are bit-exact: HF -> h5 -> HF gives the same safetensors tensors, h5 -> HF -> h5
#     the same /model (h5diff), and GPT-2's tiktoken file -> HF tokenizer -> tiktoken the same file.
#  3. llmtrain -> HF: a tiny run trained 10 steps with GPT-2's tokenizer (vocab 50257) is exported;
#     transformers loads it and gives llmtrain's logits (same tolerance); the exported tokenizer
#     (tokenizer.json, vocab.json + merges.txt) encodes like tiktoken; greedy model.generate of 8
#     tokens equals llmtrain's mode = 'generate' with temperature 0.
#  4. ONNX (opset 17, dynamic axes batch and sequence) from the .h5 and from the HF directory:
#     onnxruntime's logits equal llmtrain's / transformers' for (1, 7) and (3, 32).
#  5. Bad input (unsupported HF features, a missing file, a wrong shape, a corrupt .h5, malformed
#     safetensors headers, a weight_map naming a file outside the model directory): exit 2 with
#     one line naming the field, tensor or file.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_llmconvert.bash" # refused, bad_hf
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
# (onnx before torch: Debian's torch registers protobuf descriptors that clash with onnx's when it
# comes first; llmconvert never imports torch, and each check below runs in its own process)
deps="import onnx, onnxruntime, safetensors, tiktoken, h5py, torch, transformers"
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -f data/gpt2/gpt2.tiktoken ] || { echo "SKIP: needs data/gpt2/gpt2.tiktoken (bash validation/deps.sh)"; exit 77; }
[ -x build/ref/logits_dump ] && [ -x ./llmconvert ] || fail "build/ref/logits_dump or ./llmconvert missing (make tests)"
CHECK="$PYTHON validation/e2e/llmconvert_check.py"
D=$TEST_DIR
TOL=1e-5

# eval_loss NML NP: llmtrain's mode = 'eval' loss
eval_loss() {
    $MPIRUN -np "$2" ./llmtrain "$1" >"$1.log" 2>&1 || { tail -5 "$1.log"; fail "llmtrain eval $1 failed"; }
    grep '^eval: val_loss' "$1.log" | awk '{print $3}'
}
rel_close() { # NAME A B TOL
    awk -v n="$1" -v a="$2" -v b="$3" -v t="$4" 'BEGIN {e = (a - b) / a; if (e < 0) e = -e;
        printf "%s: %s vs %s, rel. diff %.1e (tol %g)\n", n, a, b, e, t; exit !(e <= t)}'
}
# logits_of NML B T NAME VOCAB: random ids [B, T] -> $D/NAME.ids and llmtrain's logits $D/NAME.lt.f32
logits_of() {
    $CHECK ids "$D/$4.ids" "$2" "$3" "$5" "$3" || fail "ids"
    build/ref/logits_dump "$1" "$D/$4.ids" "$2" "$3" "$D/$4.lt.f32" >/dev/null || fail "logits_dump $4 failed"
}
# greedy NML NAME OVERRIDES...: llmtrain's mode = 'generate' at temperature 0; prompt ids in
# $D/NAME.prompt, continuation in $D/NAME.ours
greedy() {
    local nml=$1 name=$2; shift 2
    $MPIRUN -np 1 ./llmtrain "$nml" "$@" >"$D/$name.log" 2>&1 || { tail -5 "$D/$name.log"; fail "llmtrain generate $name failed"; }
    sed -n 's/^generate: prompt ([0-9]* ids)://p' "$D/$name.log" >"$D/$name.prompt"
    sed -n 's/^generate: continuation: *//p' "$D/$name.log" >"$D/$name.ours"
}

echo "== llmtrain and llmconvert (the references run afterwards, each library loaded once)"
$CHECK make-hf "$D/hf" gpt2 1 + make-hf "$D/hf_bf16" gpt2 1 bfloat16 + make-hf "$D/hf_fp16" gpt2 1 float16 ||
    fail "making the random GPT2LMHeadModel failed"
./llmconvert --to hdf5 "$D/hf" "$D/imp.h5" >"$D/import.log" 2>&1 || { cat "$D/import.log"; fail "import failed"; }
grep -q "n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32" "$D/imp.nml" ||
    fail "the namelist snippet $D/imp.nml lacks the &model keys"
write_tiny_nml "$D/eval1.nml" name=eval1 mode=eval init_from="$D/imp.h5"
write_tiny_nml "$D/eval2.nml" name=eval2 mode=eval init_from="$D/imp.h5" "dp=1, tp = 2"
loss1=$(eval_loss "$D/eval1.nml" 1) && loss2=$(eval_loss "$D/eval2.nml" 2) || exit 1
logits_of "$D/eval1.nml" 3 17 imp_3x17 500
logits_of "$D/eval1.nml" 2 32 imp_2x32 500
write_tiny_nml "$D/gen1.nml" name=gen1 mode=generate init_from="$D/imp.h5" \
    extra_run="prompt_ids = 10, 20, 30, max_new_tokens = 8, temperature = 0"
greedy "$D/gen1.nml" gen_imp
./llmconvert --to hdf5 "$D/hf_bf16" "$D/imp_bf16.h5" >/dev/null && ./llmconvert --to hdf5 "$D/hf_fp16" "$D/imp_fp16.h5" >/dev/null ||
    fail "import of the bf16 / fp16 checkpoint failed"
./llmconvert --to hf "$D/imp.h5" "$D/hf_rt" >/dev/null || fail "export of the import failed"
./llmconvert --to hdf5 "$D/hf_rt" "$D/rt.h5" >/dev/null || fail "re-import failed"

write_tiny_nml "$D/train.nml" name=trained max_steps=10 val_every=0
GPT2_VOCAB="model.vocab_size=50257 data.tokenizer=data/gpt2/gpt2.tiktoken"
$MPIRUN -np 1 ./llmtrain "$D/train.nml" $GPT2_VOCAB >"$D/train.log" 2>&1 || { tail -5 "$D/train.log"; fail "training failed"; }
w=$D/trained/weights_step000010.h5
./llmconvert --to hf "$w" "$D/hf_out" >"$D/export.log" 2>&1 || { cat "$D/export.log"; fail "export failed"; }
cat "$D/export.log"
for f in config.json model.safetensors generation_config.json tokenizer.json vocab.json merges.txt tokenizer_config.json; do
    [ -s "$D/hf_out/$f" ] || fail "export wrote no $f"
done
write_tiny_nml "$D/eval3.nml" name=eval3 mode=eval init_from="$w"
sed -i 's/vocab_size = 500/vocab_size = 50257/' "$D/eval3.nml"
logits_of "$D/eval3.nml" 2 32 trained 50257
logits_of "$D/eval3.nml" 1 7 onnx_1x7 50257
logits_of "$D/eval3.nml" 3 32 onnx_3x32 50257
write_tiny_nml "$D/gen2.nml" name=gen2 mode=generate init_from="$w" \
    extra_run="prompt = 'The quick brown fox', max_new_tokens = 8, temperature = 0"
greedy "$D/gen2.nml" gen_trained $GPT2_VOCAB
./llmconvert --to hdf5 "$D/hf_out" "$D/back.h5" >"$D/back.log" 2>&1 || { cat "$D/back.log"; fail "re-import of the export failed"; }
./llmconvert --to onnx "$w" "$D/trained.onnx" || fail "ONNX export of the .h5 failed"
./llmconvert --to onnx "$D/hf" "$D/imp.onnx" || fail "ONNX export of the HF directory failed"

echo "== references: transformers, then onnxruntime"
$CHECK hf-loss "$D/hf" data/tiny/val_000.bin 32 4 4 "$D/hf_loss.txt" \
    + hf-logits "$D/hf" "$D/imp_3x17.ids" 3 17 "$D/imp_3x17.hf.f32" \
    + hf-logits "$D/hf" "$D/imp_2x32.ids" 2 32 "$D/imp_2x32.hf.f32" \
    + generate "$D/hf" 8 "$D/gen_imp.theirs" $(cat "$D/gen_imp.prompt") \
    + hf-logits "$D/hf_out" "$D/trained.ids" 2 32 "$D/trained.hf.f32" \
    + generate "$D/hf_out" 8 "$D/gen_trained.theirs" $(cat "$D/gen_trained.prompt") \
    + tokenizer "$D/hf_out" data/gpt2/gpt2.tiktoken \
    + widened "$D/imp.h5" "$D/imp_bf16.h5" bfloat16 + widened "$D/imp.h5" "$D/imp_fp16.h5" float16 ||
    fail "a transformers check failed (see above)"
$CHECK ort-logits "$D/trained.onnx" "$D/onnx_1x7.ids" 1 7 "$D/onnx_1x7.ort.f32" \
    + ort-logits "$D/trained.onnx" "$D/onnx_3x32.ids" 3 32 "$D/onnx_3x32.ort.f32" \
    + ort-logits "$D/imp.onnx" "$D/imp_3x17.ids" 3 17 "$D/imp.ort.f32" || fail "onnxruntime failed"

echo "== 1. Hugging Face -> llmtrain"
want=$(cat "$D/hf_loss.txt")
rel_close "eval loss, llmtrain 1 rank vs transformers" "$loss1" "$want" $TOL || fail "eval loss differs"
rel_close "eval loss, llmtrain tp 2 vs transformers" "$loss2" "$want" $TOL || fail "eval loss (tp 2) differs"
$CHECK compare "logits [3, 17], llmtrain vs transformers" "$D/imp_3x17.lt.f32" "$D/imp_3x17.hf.f32" $TOL \
    + compare "logits [2, 32], llmtrain vs transformers" "$D/imp_2x32.lt.f32" "$D/imp_2x32.hf.f32" $TOL ||
    fail "logits differ"

echo "== 2. round trips, bit for bit"
$CHECK same-safetensors "$D/hf/model.safetensors" "$D/hf_rt/model.safetensors" || fail "HF -> h5 -> HF changed tensors"
h5diff "$D/imp.h5" "$D/rt.h5" /model /model || fail "h5 -> HF -> h5 changed /model"
echo "h5 -> HF -> h5: /model identical (h5diff)"
h5diff "$w" "$D/back.h5" /model /model || fail "the trained run's weights changed through HF and back"
cmp "$D/back.tiktoken" data/gpt2/gpt2.tiktoken || fail "tiktoken -> tokenizer.json, vocab.json + merges.txt -> tiktoken changed the vocabulary"
echo "trained run -> HF -> h5: /model identical (h5diff); its tokenizer back as tiktoken: identical to gpt2.tiktoken (cmp)"

echo "== 3. llmtrain -> Hugging Face (a trained run, GPT-2's tokenizer), and generation"
$CHECK compare "logits [2, 32] of the trained run, llmtrain vs transformers" "$D/trained.lt.f32" "$D/trained.hf.f32" $TOL ||
    fail "logits differ"
for g in gen_imp gen_trained; do
    echo "$g: greedy continuation of [$(cat $D/$g.prompt) ]: llmtrain [$(cat $D/$g.ours)], transformers [$(cat $D/$g.theirs)]"
    [ -s "$D/$g.ours" ] && [ "$(cat "$D/$g.ours")" = "$(cat "$D/$g.theirs")" ] || fail "$g: transformers' generate differs from llmtrain's"
done

echo "== 4. ONNX"
$CHECK compare "logits [1, 7], onnxruntime vs llmtrain" "$D/onnx_1x7.lt.f32" "$D/onnx_1x7.ort.f32" $TOL \
    + compare "logits [3, 32], onnxruntime vs llmtrain" "$D/onnx_3x32.lt.f32" "$D/onnx_3x32.ort.f32" $TOL \
    + compare "logits [3, 17], onnxruntime (from the HF directory) vs transformers" "$D/imp_3x17.hf.f32" "$D/imp.ort.f32" $TOL ||
    fail "ONNX logits differ"

echo "== 5. bad input: exit 2, one message"
bad_hf bad_layer_idx 'c["scale_attn_by_inverse_layer_idx"] = True'
refused bad_layer_idx scale_attn_by_inverse_layer_idx --to hdf5 "$D/bad_layer_idx" "$D/x.h5"
bad_hf bad_act 'c["activation_function"] = "relu"'
refused bad_act activation_function --to hdf5 "$D/bad_act" "$D/x.h5"
bad_hf bad_untied 'c["tie_word_embeddings"] = False'
refused bad_untied tie_word_embeddings --to hdf5 "$D/bad_untied" "$D/x.h5"
bad_hf bad_type 'c["model_type"] = "bert"'
refused bad_type model_type --to hdf5 "$D/bad_type" "$D/x.h5"
bad_hf bad_shape 'c["n_inner"] = 128'
refused bad_shape "mlp.c_fc.weight" --to hdf5 "$D/bad_shape" "$D/x.h5"
bad_hf no_weights 'pass'
rm "$D/no_weights/model.safetensors"
refused no_weights model.safetensors --to hdf5 "$D/no_weights" "$D/x.h5"
refused no_dir "$D/nothing" --to hdf5 "$D/nothing" "$D/x.h5"
refused no_file "$D/nothing.h5" --to hf "$D/nothing.h5" "$D/x"
# malformed safetensors headers (each a copy of $D/hf whose header dict h is changed by EXPR and
# written back in front of the same data) and a sharded index whose weight_map leaves the directory
bad_st() {
    cp -r "$D/hf" "$D/$1"
    $PYTHON -c "
import json, sys
p = sys.argv[1]; raw = open(p, 'rb').read(); n = int.from_bytes(raw[:8], 'little')
h = json.loads(raw[8:8 + n]); k = sorted(x for x in h if x != '__metadata__')[0]; $2
t = json.dumps(h).encode(); open(p, 'wb').write(len(t).to_bytes(8, 'little') + t + raw[8 + n:])
" "$D/$1/model.safetensors"
}
bad_st st_list 'h = [1, 2]'
refused st_list "header is a JSON list" --to hdf5 "$D/st_list" "$D/x.h5"
bad_st st_offsets 'del h[k]["data_offsets"]'
refused st_offsets "field 'data_offsets'" --to hdf5 "$D/st_offsets" "$D/x.h5"
bad_st st_shape 'h[k]["shape"] = "768"'
refused st_shape "field 'shape'" --to hdf5 "$D/st_shape" "$D/x.h5"
bad_st st_dtype 'h[k]["dtype"] = 7'
refused st_dtype "field 'dtype'" --to hdf5 "$D/st_dtype" "$D/x.h5"
bad_st st_entry 'h[k] = 3'
refused st_entry "not an object" --to hdf5 "$D/st_entry" "$D/x.h5"
cp -r "$D/hf" "$D/st_escape"
mv "$D/st_escape/model.safetensors" "$D/model-00001-of-00001.safetensors"
echo '{"metadata": {}, "weight_map": {"wte.weight": "../model-00001-of-00001.safetensors"}}' \
    >"$D/st_escape/model.safetensors.index.json"
refused st_escape "field 'weight_map'" --to hdf5 "$D/st_escape" "$D/x.h5"
cp "$D/imp.h5" "$D/corrupt.h5"
$PYTHON -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r') as f: off = f['model/h.1.mlp.fc.w'].id.get_offset()
with open(sys.argv[1], 'r+b') as f: f.seek(off + 40); b = f.read(1); f.seek(off + 40); f.write(bytes([b[0] ^ 1]))
" "$D/corrupt.h5"
refused corrupt "h.1.mlp.fc.w" --to hf "$D/corrupt.h5" "$D/x"
[ ! -e "$D/x.h5" ] || fail "a refused import left $D/x.h5"
[ ! -e "$D/x" ] || fail "a refused export left $D/x"
echo "llmconvert_gpt2: all checks passed"
