#!/usr/bin/env bash
# bench_tokenizer.sh — encoding throughput (MB/s) of llmtrain's tokenizer next to tiktoken, same
# text, same vocabulary (data/gpt2/gpt2.tiktoken), one thread each, in one run. Not a test.
# Text (built once in build/bench/tokenizer_text.txt, about 8 MB): the licence texts and package
# copyright files installed under /usr/share (English prose, lists, code-like notices) and the
# tokenizer test corpus (code, numbers, many scripts, emoji, odd whitespace) repeated.
# Also: a tokenizer.json (Llama 3's pattern; Qwen 2's without and with its NFC normalizer) against
# `tokenizers` and a SentencePiece model against sentencepiece, the same text; llmprep end to end
# on 1 and 2 ranks. Writes build/bench/tokenizer.md.
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
    echo "| mode | llmtrain MB/s | reference MB/s (tiktoken unless named) | ratio | same ids |"
    echo "|---|---|---|---|---|"
    for mode in one-string per-doc; do
        o=$(grep " $mode " <<<"$ours") t=$(grep " $mode " <<<"$theirs")
        om=$(awk '{print $3}' <<<"$o") tm=$(awk '{print $3}' <<<"$t")
        same=no; [ "$(awk '{print $NF}' <<<"$o")" = "$(awk '{print $NF}' <<<"$t")" ] && same=yes
        echo "| $mode | $om | $tm | $(awk -v a=$om -v b=$tm 'BEGIN{printf "%.2f", a/b}') | $same |"
    done
} >$OUT/tokenizer.md
# tokenizer.json and SentencePiece against their libraries: the test's tokenizers (trained on the
# tokenizer corpus: Llama 3's pattern, 1000 ids; Qwen 2's without and with NFC, 1000 ids;
# SentencePiece BPE with Llama 2's options, 1500)
HF=$OUT/tokenizer_hf
mkdir -p $HF
for fam in llama3 qwen2 qwen2nfc; do
    $PYTHON validation/tokenizer/hf_make.py bpe $fam $HF/$fam.json validation/tokenizer/corpus/*.txt || exit 1
done
$PYTHON validation/tokenizer/hf_make.py spm $HF/spm validation/tokenizer/corpus/*.txt || exit 1
for pair in "json $HF/llama3.json tokenizer.json" "json $HF/qwen2.json tokenizer.json(Qwen2)" \
    "json $HF/qwen2nfc.json tokenizer.json(Qwen2+NFC)" "spm $HF/spm.model SentencePiece"; do
    set -- $pair
    o_all=$($OUT/bench_tokenizer $2 $TEXT $REPEATS) || exit 1
    t_all=$($PYTHON validation/bench/bench_tokenizer_hf.py $1 $2 $TEXT $REPEATS) || exit 1
    echo "$o_all"
    echo "$t_all"
    for mode in one-string per-doc; do
        o=$(grep " $mode " <<<"$o_all") t=$(grep " $mode " <<<"$t_all")
        om=$(awk '{print $3}' <<<"$o") tm=$(awk '{print $3}' <<<"$t")
        same=no; [ "$(awk '{print $NF}' <<<"$o")" = "$(awk '{print $NF}' <<<"$t")" ] && same=yes
        echo "| $3 $mode (vs $(awk '{print $1}' <<<"$t")) | $om | $tm | $(awk -v a=$om -v b=$tm 'BEGIN{printf "%.2f", a/b}') | $same |"
    done >>$OUT/tokenizer.md
done
echo "== llmprep end to end (doc separator: blank line)"
for np in 1 2; do
    $MPIRUN -np $np ./llmprep --out $OUT/tokenizer_prep_np$np --doc-separator '\n\n' $TEXT | tail -1
done
cat $OUT/tokenizer.md
