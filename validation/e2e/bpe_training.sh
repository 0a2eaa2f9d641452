#!/usr/bin/env bash
# BPE training (llmprep --train-vocab 2000) on a small corpus (the tokenizer test corpus and the
# licence texts in /usr/share/common-licenses): deterministic (two runs on 1 rank and one on 2
# ranks give byte-identical tokenizer.tiktoken and shards); the rank file is a valid merge list
# (256 bytes in order, each later token two earlier ones joined); tiktoken built from it encodes
# every document to exactly llmprep's ids, and decode(encode(x)) == x.
source "$(dirname "$0")/lib.bash"
source validation/tokenizer/common.bash
T=$TEST_DIR
FILES="$CORPUS/* $(ls /usr/share/common-licenses/* | head -12)"
ARGS="--train-vocab 2000 --val-fraction 0.02 --shard-tokens 20000"
prep 1 $T/a $ARGS $FILES
prep 1 $T/b $ARGS $FILES
prep 2 $T/c $ARGS $FILES
same_dirs $T/a $T/b
same_dirs $T/a $T/c
echo "ok  deterministic: $(head -1 $T/a.log)"
$PYTHON validation/tokenizer/check_trained_vocab.py $T/a/tokenizer.tiktoken 2000 $FILES || fail "trained vocabulary"
$PYTHON validation/tokenizer/compare_shards.py $T/a/tokenizer.tiktoken $T/a $FILES || fail "ids differ from tiktoken's with the trained vocabulary"
echo "PASS"
