#!/usr/bin/env bash
# bench_tokenizer.sh — encoding throughput (MB/s) of llmtrain's tokenizer next to tiktoken, same
# text, same vocabulary (data/gpt2/gpt2.tiktoken), one thread each, in one run. Not a test.
# Text (built once in build/bench/tokenizer_text.txt, about 8 MB): the licence texts and package
# copyright files installed under /usr/share (English prose, lists, code-like notices) and the
# tokenizer test corpus (code, numbers, many scripts, emoji, odd whitespace) repeated.
# Also: llmprep end to end on 1 and 2 ranks. Writes build/bench/tokenizer.md.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${REPEATS:=5}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
OUT=build/bench
VOCAB=data/gpt2/gpt2.tiktoken
TEXT=$OUT/tokenizer_text.txt
mkdir -p $OUT
[ -f $VOCAB ] || { echo "bench_tokenizer: $VOCAB missing: run make deps"; exit 1; }
make --no-print-directory -s build/libllmtrain.a llmprep || exit 1
# compile the C side with the Makefile's own flags
make --no-print-directory -s -f Makefile -f - bench-tokenizer-bin <<'MK' || exit 1
bench-tokenizer-bin: $(LIB)
	$(CC) $(ALL_CFLAGS) -o $(BUILD)/bench/bench_tokenizer validation/bench/bench_tokenizer.c $(LIB) $(ALL_LIBS) $(LDFLAGS)
MK
if [ ! -s $TEXT ]; then
    { cat /usr/share/common-licenses/*
      find /usr/share/doc -name copyright -type f | sort | xargs cat 2>/dev/null
    } | $PYTHON -c "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read().decode('utf-8', 'replace').encode()[:7_000_000])" >$TEXT
    for _ in $(seq 60); do cat validation/tokenizer/corpus/*.txt; done >>$TEXT
fi
mb=$(du -m $TEXT | cut -f1)
echo "== encoding $(wc -c <$TEXT) bytes (${mb} MB), 1 thread, best of $REPEATS"
ours=$($OUT/bench_tokenizer $VOCAB $TEXT $REPEATS) || exit 1
theirs=$($PYTHON validation/bench/bench_tokenizer.py $VOCAB $TEXT $REPEATS) || exit 1
echo "$ours"
echo "$theirs"
{
    echo "| mode | llmtrain MB/s | tiktoken MB/s | ratio | same ids |"
    echo "|---|---|---|---|---|"
    for mode in one-string per-doc; do
        o=$(grep " $mode " <<<"$ours") t=$(grep " $mode " <<<"$theirs")
        om=$(awk '{print $3}' <<<"$o") tm=$(awk '{print $3}' <<<"$t")
        same=no; [ "$(awk '{print $NF}' <<<"$o")" = "$(awk '{print $NF}' <<<"$t")" ] && same=yes
        echo "| $mode | $om | $tm | $(awk -v a=$om -v b=$tm 'BEGIN{printf "%.2f", a/b}') | $same |"
    done
} >$OUT/tokenizer.md
echo "== llmprep end to end (doc separator: blank line)"
for np in 1 2; do
    $MPIRUN -np $np ./llmprep --out $OUT/tokenizer_prep_np$np --doc-separator '\n\n' $TEXT | tail -1
done
cat $OUT/tokenizer.md
