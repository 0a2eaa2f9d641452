# lib_llmconvert.bash — helpers of the llmconvert scenario tests (llmconvert_gpt2.sh, llmconvert_llama.sh,
# llmconvert_llama3.sh, llmconvert_qwen2.sh, llmconvert_mistral.sh; sourced after lib.bash, with D the test's directory).
#   family_check, splice_model: below
#   refused NAME WORD ARGS...   ./llmconvert ARGS exits 2 with one stderr line containing WORD
#   bad_hf NAME PYTHON-EXPR     $D/NAME: a copy of the random model $D/hf whose config.json is
#                               changed by EXPR (on the dict c)
refused() {
    local name=$1 word=$2 rc; shift 2
    ./llmconvert "$@" >"$D/$name.out" 2>"$D/$name.err"; rc=$?
    [ $rc -eq 2 ] || { cat "$D/$name.err"; fail "$name: exit $rc, expected 2"; }
    [ "$(wc -l <"$D/$name.err")" -eq 1 ] || { cat "$D/$name.err"; fail "$name: not one line"; }
    grep -qF -- "$word" "$D/$name.err" || { cat "$D/$name.err"; fail "$name: message does not name $word"; }
    echo "$name: $(cat "$D/$name.err")"
}
bad_hf() {
    cp -r "$D/hf" "$D/$1"
    $PYTHON -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); $2; json.dump(c, open(p, 'w'))" "$D/$1/config.json"
}

# family_check KIND SNIPPET_LINE TRAIN_KEYS: the llmconvert checks of a Llama-like family (KIND
# llama3, qwen2, mistral: llmconvert_check.py make-hf) against its reference (transformers 4.36.2,
# with validation/reference/hf_newer.py for Llama 3.1's rope_scaling and Qwen 2):
#  1. HF -> h5 -> HF safetensors bit-identical; the printed &model keys hold SNIPPET_LINE; ONNX of
#     the HF directory: onnxruntime's logits = the reference's (1e-5 x max(1, max |logit|)).
#  2. llmtrain on the import: eval loss (1 rank and tp 2) rel. 1e-5 of the reference's, logits
#     [2, 32] within 1e-5, greedy generation equal to model.generate, h5 -> HF -> h5 /model equal.
#  3. a llama run with TRAIN_KEYS trained 6 steps, exported: the reference loads the export and
#     gives llmtrain's logits, so does onnxruntime; HF -> h5 gives the run's /model back.
family_check() {
    local kind=$1 line=$2 keys=$3 TOL=1e-5
    local CHECK="$PYTHON validation/e2e/llmconvert_check.py"
    echo "== $kind: 1. without llmtrain"
    $CHECK make-hf "$D/hf" "$kind" 3 || fail "making the random $kind model failed"
    ./llmconvert --to hdf5 "$D/hf" "$D/imp.h5" >"$D/import.log" 2>&1 || { cat "$D/import.log"; fail "import failed"; }
    cat "$D/import.log"
    grep -qF "$line" "$D/imp.nml" || fail "the namelist snippet $D/imp.nml lacks '$line'"
    ./llmconvert --to hf "$D/imp.h5" "$D/hf_rt" >/dev/null || fail "export of the import failed"
    ./llmconvert --to onnx "$D/hf" "$D/hf.onnx" >/dev/null || fail "ONNX export of the HF directory failed"
    # onnxruntime in a process without torch (llmconvert_gpt2.sh says why)
    $CHECK ids "$D/b.ids" 2 32 500 32 + ort-logits "$D/hf.onnx" "$D/b.ids" 2 32 "$D/b.ort.f32" &&
        $CHECK hf-logits "$D/hf" "$D/b.ids" 2 32 "$D/b.hf.f32" \
        + same-safetensors "$D/hf/model.safetensors" "$D/hf_rt/model.safetensors" \
        + compare "logits [2, 32], onnxruntime vs reference" "$D/b.hf.f32" "$D/b.ort.f32" $TOL || fail "see above"

    echo "== $kind: 2. llmtrain on the import"
    local n
    for n in 1 2; do
        write_tiny_nml "$D/eval$n.nml" name=eval$n mode=eval init_from="$D/imp.h5" "dp=1, tp = $n"
        splice_model "$D/eval$n.nml" "$D/imp.nml"
        $MPIRUN -np $n ./llmtrain "$D/eval$n.nml" >"$D/eval$n.log" 2>&1 || { tail -5 "$D/eval$n.log"; fail "eval on $n ranks failed"; }
    done
    local loss1 loss2
    loss1=$(grep '^eval: val_loss' "$D/eval1.log" | awk '{print $3}')
    loss2=$(grep '^eval: val_loss' "$D/eval2.log" | awk '{print $3}')
    build/ref/logits_dump "$D/eval1.nml" "$D/b.ids" 2 32 "$D/b.lt.f32" >/dev/null || fail "logits_dump failed"
    write_tiny_nml "$D/gen.nml" name=gen mode=generate init_from="$D/imp.h5" \
        extra_run="prompt_ids = 10, 20, 30, max_new_tokens = 8, temperature = 0"
    splice_model "$D/gen.nml" "$D/imp.nml"
    $MPIRUN -np 1 ./llmtrain "$D/gen.nml" >"$D/gen.log" 2>&1 || { tail -5 "$D/gen.log"; fail "generate failed"; }
    sed -n 's/^generate: continuation: *//p' "$D/gen.log" >"$D/gen.ours"
    ./llmconvert --to hdf5 "$D/hf_rt" "$D/rt.h5" >/dev/null || fail "re-import failed"
    h5diff "$D/imp.h5" "$D/rt.h5" /model /model || fail "h5 -> HF -> h5 changed /model"

    echo "== $kind: 3. a trained run exported"
    write_tiny_nml "$D/train.nml" name=trained max_steps=6 val_every=0
    splice_model "$D/train.nml" "$D/imp.nml"
    $MPIRUN -np 1 ./llmtrain "$D/train.nml" $keys >"$D/train.log" 2>&1 || { tail -5 "$D/train.log"; fail "training failed"; }
    local w=$D/trained/weights_step000006.h5
    ./llmconvert --to hf "$w" "$D/hf_out" >/dev/null && ./llmconvert --to onnx "$w" "$D/trained.onnx" >/dev/null ||
        fail "export of the trained run failed"
    ./llmconvert --to hdf5 "$D/hf_out" "$D/back.h5" >/dev/null || fail "re-import of the export failed"
    h5diff "$w" "$D/back.h5" /model /model || fail "the trained run's weights changed through HF and back"
    write_tiny_nml "$D/eval3.nml" name=eval3 mode=eval init_from="$w"
    splice_model "$D/eval3.nml" "$D/back.nml"
    build/ref/logits_dump "$D/eval3.nml" "$D/b.ids" 2 32 "$D/c.lt.f32" >/dev/null || fail "logits_dump of the trained run failed"

    $CHECK ort-logits "$D/trained.onnx" "$D/b.ids" 2 32 "$D/c.ort.f32" || fail "onnxruntime failed"
    $CHECK hf-loss "$D/hf" data/tiny/val_000.bin 32 4 4 "$D/hf_loss.txt" \
        + generate "$D/hf" 8 "$D/gen.theirs" 10 20 30 \
        + compare "logits [2, 32], llmtrain vs reference" "$D/b.lt.f32" "$D/b.hf.f32" $TOL \
        + hf-logits "$D/hf_out" "$D/b.ids" 2 32 "$D/c.hf.f32" \
        + compare "logits [2, 32] of the trained run, reference on the export vs llmtrain" "$D/c.lt.f32" "$D/c.hf.f32" $TOL \
        + compare "logits [2, 32] of the trained run, onnxruntime vs llmtrain" "$D/c.lt.f32" "$D/c.ort.f32" $TOL ||
        fail "a reference check failed"
    local want; want=$(cat "$D/hf_loss.txt")
    awk -v a="$loss1" -v b="$loss2" -v w="$want" -v t=$TOL 'BEGIN { e1 = (a - w) / w; e2 = (b - w) / w; if (e1 < 0) e1 = -e1; if (e2 < 0) e2 = -e2;
        printf "eval loss: llmtrain 1 rank %s, tp 2 %s, reference %s: rel. diff %.1e, %.1e (tol %g)\n", a, b, w, e1, e2, t; exit !(e1 <= t && e2 <= t) }' ||
        fail "eval loss differs"
    echo "greedy continuation of [10 20 30]: llmtrain [$(cat "$D/gen.ours")], reference [$(cat "$D/gen.theirs")]"
    [ -s "$D/gen.ours" ] && [ "$(cat "$D/gen.ours")" = "$(cat "$D/gen.theirs")" ] || fail "greedy generation differs"
}

# splice_model NML SNIPPET: NML's &model group replaced by the one llmconvert printed
splice_model() {
    awk -v snip="$2" 'BEGIN { while ((getline l < snip) > 0) { if (l == "&model") c = 1; if (c) m = m l "\n"; if (c && l == "/") c = 0 } }
        $0 == "&model" { skip = 1; printf "%s", m; next } skip && $0 == "/" { skip = 0; next } !skip' "$1" >"$1.new" && mv "$1.new" "$1"
}
