#!/usr/bin/env bash
# Token ids identical to tiktoken (encode_ordinary, built from the same gpt2.tiktoken) for every
# document, and decode(encode(x)) == x, on: the test corpus (English, code, numbers, many scripts,
# emoji, odd whitespace, invalid UTF-8, "<|endoftext|>" as text), every Unicode scalar value in
# context, and 3000 fuzz documents (invalid UTF-8 compared per validation/tokenizer/tiktoken_ref.py).
# Documents are encoded in 64-byte slices (--chunk-bytes 64) to check the safe cuts as well, and
# the vocabulary is also read as Hugging Face files (vocab.json + merges.txt made from it).
source "$(dirname "$0")/lib.bash"
source validation/tokenizer/common.bash
T=$TEST_DIR
$PYTHON validation/tokenizer/make_test_text.py fuzz 1 3000 $T/fuzz.txt
$PYTHON validation/tokenizer/make_test_text.py codepoints $T/codepoints.txt
SEP=$($PYTHON -c "import sys; sys.path.insert(0, 'validation/tokenizer'); import make_test_text as m; print(m.SEPARATOR_ARG)")

prep 1 $T/corpus --tokenizer $GPT2_VOCAB --val-fraction 0 --chunk-bytes 64 $CORPUS/*
$PYTHON validation/tokenizer/compare_shards.py $GPT2_VOCAB $T/corpus $CORPUS/* || fail "corpus"
cmp $GPT2_VOCAB $T/corpus/tokenizer.tiktoken || fail "tokenizer.tiktoken is not a copy of $GPT2_VOCAB"

# the same vocabulary as Hugging Face files (a directory, or the vocab.json path): same ids
$PYTHON validation/tokenizer/tiktoken_to_hf.py $GPT2_VOCAB $T/hf || fail "tiktoken_to_hf"
prep 1 $T/corpus_hf --tokenizer $T/hf --val-fraction 0 --chunk-bytes 64 $CORPUS/*
prep 1 $T/corpus_hf_json --tokenizer $T/hf/vocab.json --val-fraction 0 $CORPUS/*
for f in $T/corpus/*.bin $T/corpus/tokenizer.tiktoken; do
    cmp $f $T/corpus_hf/$(basename $f) || fail "Hugging Face files (directory) give other output"
    cmp $f $T/corpus_hf_json/$(basename $f) || fail "Hugging Face files (vocab.json) give other output"
done
echo "ok  vocab.json + merges.txt give the same ids and the same rank file"

prep 2 $T/codepoints --tokenizer $GPT2_VOCAB --val-fraction 0 $T/codepoints.txt
$PYTHON validation/tokenizer/compare_shards.py $GPT2_VOCAB $T/codepoints $T/codepoints.txt || fail "code points"

prep 2 $T/fuzz --tokenizer $GPT2_VOCAB --val-fraction 0 --chunk-bytes 64 --doc-separator "$SEP" $T/fuzz.txt
$PYTHON validation/tokenizer/compare_shards.py $GPT2_VOCAB $T/fuzz --sep "$SEP" $T/fuzz.txt || fail "fuzz"
echo "PASS: ids identical to tiktoken and decode exact on corpus, code points and fuzz documents"
