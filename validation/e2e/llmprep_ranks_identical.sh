#!/usr/bin/env bash
# llmprep on 1, 3 and 4 ranks writes byte-identical output (cmp of every shard, manifest.json and
# tokenizer.tiktoken): GPT-2's vocabulary with documents split by a separator and shards that
# straddle rank boundaries, then a vocabulary trained on the input (--train-vocab) with a file
# per document. A rerun into the same directory leaves no stale shards. Bad input (missing or
# unreadable file, broken vocabulary, bad options) ends every rank with exit code 2 and one
# message naming the problem, no crash or MPI abort banner.
source "$(dirname "$0")/lib.bash"
source validation/tokenizer/common.bash
ulimit -c 0
T=$TEST_DIR
$PYTHON validation/tokenizer/make_test_text.py fuzz 2 1500 $T/fuzz.txt
SEP=$($PYTHON -c "import sys; sys.path.insert(0, 'validation/tokenizer'); import make_test_text as m; print(m.SEPARATOR_ARG)")
FILES="$CORPUS/english.txt $T/fuzz.txt $CORPUS/languages.txt $CORPUS/invalid_utf8.bin $CORPUS/whitespace.txt"

GPT2_ARGS="--tokenizer $GPT2_VOCAB --shard-tokens 4000 --val-fraction 0.05 --doc-separator $SEP --chunk-bytes 300"
for np in 1 3 4; do prep $np $T/gpt2_np$np $GPT2_ARGS $FILES; done
n=$(ls $T/gpt2_np1/train_*.bin | wc -l)
[ "$n" -ge 5 ] || fail "expected several train shards, got $n"
same_dirs $T/gpt2_np1 $T/gpt2_np3
same_dirs $T/gpt2_np1 $T/gpt2_np4
echo "ok  GPT-2 vocabulary: 1, 3 and 4 ranks identical ($n train shards + val): $(tail -1 $T/gpt2_np1.log)"

for np in 1 4; do prep $np $T/trained_np$np --train-vocab 700 --shard-tokens 3000 --val-fraction 0.1 $FILES; done
same_dirs $T/trained_np1 $T/trained_np4
echo "ok  trained vocabulary: 1 and 4 ranks identical: $(head -1 $T/trained_np1.log)"

prep 2 $T/rerun $GPT2_ARGS --shard-tokens 1000 $FILES # more, smaller shards first
prep 4 $T/rerun $GPT2_ARGS $FILES
same_dirs $T/gpt2_np1 $T/rerun
echo "ok  a rerun into the same directory leaves exactly the new shards"

check_error() { # name expected-substring np args...
    local name=$1 want=$2 np=$3 rc; shift 3
    timeout 60 $MPIRUN -np "$np" ./llmprep "$@" >$T/$name.out 2>$T/$name.err
    rc=$?
    [ $rc -eq 2 ] || { cat $T/$name.err; fail "$name: exit code $rc, expected 2"; }
    grep -qF -- "$want" $T/$name.err || { cat $T/$name.err; fail "$name: message lacks '$want'"; }
    local k; k=$(grep -c "error" $T/$name.err)
    [ "$k" -eq 1 ] || { cat $T/$name.err; fail "$name: $k error lines, expected 1"; }
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked" $T/$name.err; then fail "$name: crash/abort banner"; fi
    echo "ok  $name: $(grep error $T/$name.err)"
}
head -300 $GPT2_VOCAB >$T/broken.tiktoken && echo "not-base64! 300" >>$T/broken.tiktoken
: >$T/empty.txt
check_error missing_file "no_such.txt" 2 --out $T/e $CORPUS/english.txt $T/no_such.txt
check_error directory_as_file "not a regular file" 2 --out $T/e $CORPUS
check_error broken_vocab "broken.tiktoken:301:" 2 --tokenizer $T/broken.tiktoken --out $T/e $CORPUS/english.txt
check_error missing_vocab "none.tiktoken" 4 --tokenizer $T/none.tiktoken --out $T/e $CORPUS/english.txt
check_error unknown_option "--bogus" 2 --bogus --out $T/e $CORPUS/english.txt
check_error val_fraction "--val-fraction '1.5'" 2 --val-fraction 1.5 --out $T/e $CORPUS/english.txt
check_error both_vocabs "not both" 2 --tokenizer $GPT2_VOCAB --train-vocab 500 --out $T/e $CORPUS/english.txt
check_error vocab_too_small "--train-vocab '100'" 2 --train-vocab 100 --out $T/e $CORPUS/english.txt
check_error no_out "--out DIR is required" 2 $CORPUS/english.txt
check_error no_files "no input files" 2 --out $T/e
check_error no_text "hold no text" 2 --out $T/e $T/empty.txt
check_error all_val "leaves no training tokens" 2 --val-fraction 0.999 --out $T/e $CORPUS/numbers.txt
echo "PASS"
