#!/usr/bin/env bash
# llmconvert with Llama (LlamaForCausalLM <-> &model arch = 'llama') against the real transformers
# 4.36.2 and onnxruntime. A random LlamaForCausalLM with grouped-query attention (4 heads, 2 kv
# heads), an untied head, rms_norm_eps 1e-6 and rope_theta 5e5, every tensor perturbed:
#  1. without llmtrain: HF -> h5 -> HF gives the same safetensors tensors (bit for bit); the ONNX
#     graph (opset 17, dynamic batch and sequence) from the HF directory gives transformers'
#     logits (1e-5 x max(1, max |logit|)) for (3, 17) and (2, 32); unsupported features
#     (rope_scaling, hidden_act, attention_bias, num_key_value_heads not dividing the heads) are
#     one message naming the field, exit 2.
#  2. with llmtrain (skipped, exit 77, while llmtrain refuses &model arch = 'llama'): the imported
#     file, with the printed &model keys, gives transformers' eval loss (rel. 1e-5) on 1 rank and
#     tp = 2 and its logits; h5 -> HF -> h5 keeps /model; a llama run trained 10 steps (tied
#     head, one kv head) is exported and gives llmtrain's logits in transformers and onnxruntime;
#     greedy model.generate equals llmtrain's mode = 'generate' at temperature 0.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_llmconvert.bash" # refused, bad_hf
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
deps="import onnx, onnxruntime, safetensors, h5py, torch, transformers" # onnx before torch: see llmconvert_gpt2.sh
$PYTHON -c "$deps" 2>/dev/null || { echo "SKIP: needs $deps (bash validation/deps.sh)"; exit 77; }
[ -x build/ref/logits_dump ] && [ -x ./llmconvert ] || fail "build/ref/logits_dump or ./llmconvert missing (make tests)"
CHECK="$PYTHON validation/e2e/llmconvert_check.py"
D=$TEST_DIR
TOL=1e-5

echo "== 1. without llmtrain"
$CHECK make-hf "$D/hf" llama 3 || fail "making the random LlamaForCausalLM failed"
./llmconvert --to hdf5 "$D/hf" "$D/imp.h5" >"$D/import.log" 2>&1 || { cat "$D/import.log"; fail "import failed"; }
cat "$D/import.log"
grep -q "n_kv_head = 2, tie_embeddings = .false., bias = .false." "$D/imp.nml" &&
    grep -q "norm_eps = 1e-06, pos = 'rope', rope_theta = 500000.0, mlp = 'swiglu'" "$D/imp.nml" ||
    fail "the namelist snippet $D/imp.nml lacks the Llama keys"
./llmconvert --to hf "$D/imp.h5" "$D/hf_rt" >/dev/null || fail "export of the import failed"
./llmconvert --to onnx "$D/hf" "$D/hf.onnx" || fail "ONNX export of the HF directory failed"
$CHECK ids "$D/a.ids" 3 17 500 17 + ids "$D/b.ids" 2 32 500 32 || fail "ids"
$CHECK hf-logits "$D/hf" "$D/a.ids" 3 17 "$D/a.hf.f32" + hf-logits "$D/hf" "$D/b.ids" 2 32 "$D/b.hf.f32" ||
    fail "transformers' logits"
$CHECK same-safetensors "$D/hf/model.safetensors" "$D/hf_rt/model.safetensors" \
    + ort-logits "$D/hf.onnx" "$D/a.ids" 3 17 "$D/a.ort.f32" + ort-logits "$D/hf.onnx" "$D/b.ids" 2 32 "$D/b.ort.f32" \
    + compare "logits [3, 17], onnxruntime vs transformers" "$D/a.hf.f32" "$D/a.ort.f32" $TOL \
    + compare "logits [2, 32], onnxruntime vs transformers" "$D/b.hf.f32" "$D/b.ort.f32" $TOL || fail "see above"

bad_hf bad_scaling 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
refused bad_scaling rope_scaling --to hdf5 "$D/bad_scaling" "$D/x.h5"
bad_hf bad_act 'c["hidden_act"] = "gelu"'
refused bad_act hidden_act --to hdf5 "$D/bad_act" "$D/x.h5"
bad_hf bad_bias 'c["attention_bias"] = True'
refused bad_bias attention_bias --to hdf5 "$D/bad_bias" "$D/x.h5"
bad_hf bad_kv 'c["num_key_value_heads"] = 3'
refused bad_kv num_key_value_heads --to hdf5 "$D/bad_kv" "$D/x.h5"
[ ! -e "$D/x.h5" ] || fail "a refused import left $D/x.h5"

echo "== 2. with llmtrain"
# splice_model NML SNIPPET: NML's &model group replaced by the one llmconvert printed
splice_model() {
    awk -v snip="$2" 'BEGIN { while ((getline l < snip) > 0) { if (l == "&model") c = 1; if (c) m = m l "\n"; if (c && l == "/") c = 0 } }
        $0 == "&model" { skip = 1; printf "%s", m; next } skip && $0 == "/" { skip = 0; next } !skip' "$1" >"$1.new" && mv "$1.new" "$1"
}
write_tiny_nml "$D/eval1.nml" name=eval1 mode=eval init_from="$D/imp.h5"
splice_model "$D/eval1.nml" "$D/imp.nml"
if ! $MPIRUN -np 1 ./llmtrain --plan "$D/eval1.nml" >"$D/probe.log" 2>&1; then
    grep -qi "arch\|llama\|norm\|rope\|swiglu\|n_kv_head" "$D/probe.log" || { cat "$D/probe.log"; fail "llmtrain --plan failed"; }
    echo "part 1 passed; part 2 needs llmtrain's Llama architecture"
    echo "SKIP: llmtrain refuses &model arch = 'llama': $(grep -m1 -i "arch\|llama\|norm\|rope\|swiglu\|n_kv_head" "$D/probe.log")"
    exit 77
fi
eval_loss() { # NML NP
    $MPIRUN -np "$2" ./llmtrain "$1" >"$1.log" 2>&1 || { tail -5 "$1.log"; fail "llmtrain eval $1 failed"; }
    grep '^eval: val_loss' "$1.log" | awk '{print $3}'
}
rel_close() { # NAME A B TOL
    awk -v n="$1" -v a="$2" -v b="$3" -v t="$4" 'BEGIN {e = (a - b) / a; if (e < 0) e = -e;
        printf "%s: %s vs %s, rel. diff %.1e (tol %g)\n", n, a, b, e, t; exit !(e <= t)}'
}
greedy() { # NML NAME: prompt ids in $D/NAME.prompt, continuation in $D/NAME.ours
    $MPIRUN -np 1 ./llmtrain "$1" >"$D/$2.log" 2>&1 || { tail -5 "$D/$2.log"; fail "llmtrain generate $2 failed"; }
    sed -n 's/^generate: prompt ([0-9]* ids)://p' "$D/$2.log" >"$D/$2.prompt"
    sed -n 's/^generate: continuation: *//p' "$D/$2.log" >"$D/$2.ours"
}
write_tiny_nml "$D/eval2.nml" name=eval2 mode=eval init_from="$D/imp.h5" "dp=1, tp = 2"
splice_model "$D/eval2.nml" "$D/imp.nml"
loss1=$(eval_loss "$D/eval1.nml" 1) && loss2=$(eval_loss "$D/eval2.nml" 2) || exit 1
build/ref/logits_dump "$D/eval1.nml" "$D/a.ids" 3 17 "$D/a.lt.f32" >/dev/null &&
    build/ref/logits_dump "$D/eval1.nml" "$D/b.ids" 2 32 "$D/b.lt.f32" >/dev/null || fail "logits_dump failed"
write_tiny_nml "$D/gen1.nml" name=gen1 mode=generate init_from="$D/imp.h5" \
    extra_run="prompt_ids = 10, 20, 30, max_new_tokens = 8, temperature = 0"
splice_model "$D/gen1.nml" "$D/imp.nml"
greedy "$D/gen1.nml" gen_imp
./llmconvert --to hdf5 "$D/hf_rt" "$D/rt.h5" >/dev/null || fail "re-import failed"
h5diff "$D/imp.h5" "$D/rt.h5" /model /model || fail "h5 -> HF -> h5 changed /model"
echo "h5 -> HF -> h5: /model identical (h5diff)"

LLAMA="model.arch=llama model.n_kv_head=1 model.tie_embeddings=.true. model.d_ff=160"
write_tiny_nml "$D/train.nml" name=trained max_steps=10 val_every=0
$MPIRUN -np 1 ./llmtrain "$D/train.nml" $LLAMA >"$D/train.log" 2>&1 || { tail -5 "$D/train.log"; fail "training failed"; }
w=$D/trained/weights_step000010.h5
./llmconvert --to hf "$w" "$D/hf_out" >/dev/null || fail "export failed"
./llmconvert --to onnx "$w" "$D/trained.onnx" || fail "ONNX export of the .h5 failed"
grep -q '"tie_word_embeddings": true' "$D/hf_out/config.json" && grep -q '"num_key_value_heads": 1' "$D/hf_out/config.json" ||
    fail "the exported config.json lacks the run's tie_embeddings / n_kv_head"
write_tiny_nml "$D/eval3.nml" name=eval3 mode=eval init_from="$w"
./llmconvert --to hdf5 "$D/hf_out" "$D/trained_back.h5" >/dev/null || fail "re-import of the export failed"
h5diff "$w" "$D/trained_back.h5" /model /model || fail "the trained run's weights changed through HF and back"
splice_model "$D/eval3.nml" "$D/trained_back.nml"
build/ref/logits_dump "$D/eval3.nml" "$D/b.ids" 2 32 "$D/c.lt.f32" >/dev/null || fail "logits_dump of the trained run failed"
write_tiny_nml "$D/gen2.nml" name=gen2 mode=generate init_from="$w" \
    extra_run="prompt_ids = 5, 6, 7, max_new_tokens = 8, temperature = 0"
splice_model "$D/gen2.nml" "$D/trained_back.nml"
greedy "$D/gen2.nml" gen_trained

$CHECK hf-loss "$D/hf" data/tiny/val_000.bin 32 4 4 "$D/hf_loss.txt" \
    + generate "$D/hf" 8 "$D/gen_imp.theirs" $(cat "$D/gen_imp.prompt") \
    + hf-logits "$D/hf_out" "$D/b.ids" 2 32 "$D/c.hf.f32" \
    + generate "$D/hf_out" 8 "$D/gen_trained.theirs" $(cat "$D/gen_trained.prompt") || fail "a transformers check failed"
want=$(cat "$D/hf_loss.txt")
rel_close "eval loss, llmtrain 1 rank vs transformers" "$loss1" "$want" $TOL || fail "eval loss differs"
rel_close "eval loss, llmtrain tp 2 vs transformers" "$loss2" "$want" $TOL || fail "eval loss (tp 2) differs"
$CHECK compare "logits [3, 17], llmtrain vs transformers" "$D/a.lt.f32" "$D/a.hf.f32" $TOL \
    + compare "logits [2, 32], llmtrain vs transformers" "$D/b.lt.f32" "$D/b.hf.f32" $TOL \
    + compare "logits [2, 32] of the trained run, llmtrain vs transformers" "$D/c.lt.f32" "$D/c.hf.f32" $TOL \
    + ort-logits "$D/trained.onnx" "$D/b.ids" 2 32 "$D/c.ort.f32" \
    + compare "logits [2, 32] of the trained run, onnxruntime vs llmtrain" "$D/c.lt.f32" "$D/c.ort.f32" $TOL ||
    fail "logits differ"
for g in gen_imp gen_trained; do
    echo "$g: greedy continuation of [$(cat $D/$g.prompt) ]: llmtrain [$(cat $D/$g.ours)], transformers [$(cat $D/$g.theirs)]"
    [ -s "$D/$g.ours" ] && [ "$(cat "$D/$g.ours")" = "$(cat "$D/$g.theirs")" ] || fail "$g: transformers' generate differs"
done
echo "llmconvert_llama: all checks passed"
