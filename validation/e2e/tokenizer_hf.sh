#!/usr/bin/env bash
# Hugging Face tokenizer.json (byte-level BPE) and SentencePiece models: llmprep's ids identical
# to the reference libraries. Tokenizers of the real families are trained here (no real file is
# fetched): byte-level BPE with the `tokenizers` library and the pre-tokenizer regex of Llama 3
# (GPT-4's too), Qwen 2 and GPT-4o, with special tokens, a non-special added token and
# <|begin_of_text|> as the document token; Qwen 2's with its NFC normalizer and two `normalized`
# added tokens; a SentencePiece BPE model with Llama 2's options (byte fallback, split digits, a
# user-defined symbol) and a unigram one (NFKC) with the sentencepiece library. Documents: the
# tokenizer corpus (English, code, many scripts, emoji, odd whitespace, \r\n, tabs), a mixed text
# with the added and special tokens as text, a text of NFC's cases (decomposed and precomposed
# letters, marks out of order, Hangul jamo, exclusions), and 150 fuzz documents of white space,
# letters, digits, emoji, decomposed letters and tokens, encoded in 64-byte slices on 2 ranks;
# for the NFC tokenizer also every code point below U+20000 alone, in NFD and after a base with
# two marks (1.6 MB). References: `tokenizers` (tokenizer.json), sentencepiece's own encoder and transformers'
# LlamaTokenizerFast (.model).
# Then a run of llmtrain on the shards with &data tokenizer: 3 training steps, and generation with
# a text prompt whose ids are the library's. Bad files (corrupt JSON, WordPiece, Unigram, an NFKC
# normalizer, a cut .model): exit 2 with one message naming the file.
source "$(dirname "$0")/lib.bash"
T=$TEST_DIR
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
make --no-print-directory -s llmprep llmtrain >$T/make.log 2>&1 || { cat $T/make.log; fail "make failed"; }
$PYTHON -c "import tokenizers" 2>/dev/null || fail "tokenizers is not in .deps/python: run 'make deps'"
$PYTHON -c "import sentencepiece" 2>/dev/null || fail "no sentencepiece Python module: run 'make deps'"
C=validation/tokenizer/corpus
mkdir -p $T/docs
$PYTHON validation/tokenizer/hf_make.py texts $T/docs 150
CORPUS=$(ls $C/*.txt)
DOCS="$CORPUS $T/docs/mixed.txt $T/docs/nfc.txt $(ls $T/docs/fuzz_*.txt)"

prep() { # OUT_DIR TOKENIZER FILES...
    local out=$1 tok=$2; shift 2
    timeout 60 $MPIRUN -np 2 ./llmprep --out $out --tokenizer $tok --val-fraction 0 --chunk-bytes 64 \
        "$@" >$out.log 2>&1 || { cat $out.log; fail "llmprep --tokenizer $tok"; }
}
compare() { # KIND TOKENIZER OUT_DIR FILES...
    $PYTHON validation/tokenizer/hf_compare.py "$@" || fail "$1 $2: ids differ from the library"
}

for fam in llama3 qwen2 gpt4o qwen2nfc; do
    $PYTHON validation/tokenizer/hf_make.py bpe $fam $T/$fam.json $CORPUS || fail "training $fam"
    docs=$DOCS
    [ $fam = qwen2nfc ] && docs="$DOCS $T/docs/unicode.txt"
    prep $T/$fam $T/$fam.json $docs
    compare json $T/$fam.json $T/$fam $docs
    cmp $T/$fam.json $T/$fam/tokenizer.json || fail "$fam: the out dir's tokenizer.json is not a copy"
    grep -qF '"tokenizer_kind": "byte-level BPE (tokenizer.json)"' $T/$fam/manifest.json ||
        fail "$fam: manifest tokenizer_kind"
done

$PYTHON validation/tokenizer/hf_make.py spm $T/spm $CORPUS || fail "training SentencePiece"
prep $T/spm $T/spm.model $DOCS
compare spm $T/spm.model $T/spm $DOCS
cmp $T/spm.model $T/spm/tokenizer.model || fail "spm: the out dir's tokenizer.model is not a copy"
grep -qF '"tokenizer_kind": "SentencePiece"' $T/spm/manifest.json || fail "spm: manifest tokenizer_kind"
# a unigram model with NFKC normalization (T5's kind): the library does both
$PYTHON validation/tokenizer/hf_make.py unigram $T/unigram $CORPUS || fail "training unigram"
prep $T/unigram $T/unigram.model $DOCS
compare spm $T/unigram.model $T/unigram $DOCS
# transformers' conversion of a .model to LlamaTokenizerFast drops user-defined symbols
# (<tool_call>), so that comparison takes the corpus only
if $PYTHON -c "import transformers" 2>/dev/null; then
    prep $T/spm_corpus $T/spm.model $CORPUS
    compare llama $T/spm.model $T/spm_corpus $CORPUS
fi

# llmtrain: 3 steps on the Llama 3 shards, then a text prompt through &data tokenizer
cat >$T/train.nml <<NML
&run name = 'train', out_dir = '$T', seed = 3 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 1024, seq_len = 16 /
&parallel dp = 2 /
&train max_steps = 3, micro_batch = 2, global_batch = 4, lr = 1e-3 /
&data train_files = '$T/llama3/train_*.bin', tokenizer = '$T/llama3/tokenizer.json' /
&log every = 1 /
NML
timeout 60 $MPIRUN -np 2 ./llmtrain $T/train.nml >$T/train.log 2>&1 || { tail -20 $T/train.log; fail "training"; }
[ "$(losses $T/train/metrics.jsonl | grep -cE '^[0-9]+\.[0-9]+$')" -eq 3 ] || fail "expected 3 finite losses"
echo "ok  llmtrain: 3 steps on llmprep's Llama 3 shards, losses $(losses $T/train/metrics.jsonl | tr '\n' ' ')"
PROMPT="<|start_header_id|>Grüße, 世界! def f(x):   return x  👋🏽"
gen() { # NAME TOKENIZER KIND VOCAB_SIZE [INIT_FROM]
    cat >$T/$1.nml <<NML
&run name = '$1', out_dir = '$T', mode = 'generate', seed = 5, init_from = '${5-}'
     prompt = '$PROMPT', max_new_tokens = 4, temperature = 0 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = $4, seq_len = 16 /
&data tokenizer = '$2' /
NML
    timeout 60 $MPIRUN -np 1 ./llmtrain $T/$1.nml >$T/$1.log 2>&1 || { cat $T/$1.log; fail "generate $1"; }
    local got want
    got=$(grep '^generate: prompt' $T/$1.log | sed 's/.*: //')
    want=$($PYTHON - "$3" "$2" "$PROMPT" <<'PY'
import sys
import os
kind, path, text = sys.argv[1:4]
if os.path.isdir(path):  # llmprep's output directory: the tokenizer kept there
    path = os.path.join(path, "tokenizer.json" if kind == "json" else "tokenizer.model")
if kind == "json":  # the prompt's special tokens are tokens, as llmtrain reads a prompt
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids
else:
    import sentencepiece as S
    ids = S.SentencePieceProcessor(model_file=path).encode(text)
print(" ".join(map(str, ids)))
PY
)
    [ "$got" = "$want" ] || fail "generate $1: prompt ids '$got', the library's '$want'"
    echo "ok  generate with &data tokenizer = $2: the prompt's $(echo $got | wc -w) ids are the library's"
}
gen gen_json $T/llama3/tokenizer.json json 1024 $T/train/weights_step000003.h5
gen gen_spm $T/spm spm 1536 # the directory llmprep wrote: its tokenizer.model

# files llmtrain cannot read: exit 2, one message naming the file
for kind in corrupt wordpiece unigram nfkc; do
    $PYTHON validation/tokenizer/hf_make.py bad $kind $T/bad_$kind.json
done
head -c 200 $T/spm.model >$T/bad_cut.model
for f in $T/bad_corrupt.json $T/bad_wordpiece.json $T/bad_unigram.json $T/bad_nfkc.json $T/bad_cut.model; do
    timeout 60 $MPIRUN -np 2 ./llmprep --out $T/bad --tokenizer $f $C/english.txt >$T/bad.out 2>$T/bad.err
    rc=$?
    [ $rc -eq 2 ] || { cat $T/bad.out $T/bad.err; fail "$f: exit $rc, expected 2"; }
    [ "$(grep -c "^llmprep: error: --tokenizer: $f" $T/bad.err)" -eq 1 ] ||
        { cat $T/bad.err; fail "$f: not one message naming the file"; }
    grep "^llmprep: error" $T/bad.err
done
echo "PASS: tokenizer.json (Llama 3, Qwen 2 with and without NFC, GPT-4o patterns) and SentencePiece ids identical" \
    "to the libraries; llmtrain reads them"
