#!/usr/bin/env bash
# demo.sh — `make demo` (after the Makefile has installed what is missing and built): train a
# 1024-id byte-level BPE vocabulary on the Debian `fortunes` collection and tokenise it with it
# (llmprep on 2 ranks), train inputs/demo.nml on a dp 2 x tp 2 x pp 2 grid (8 ranks), show the
# loss going down and a sample, and write the run's report (llmreport).
# A vocabulary of the corpus's own 1024 pieces instead of GPT-2's 50257: the model spends its
# few minutes on the text rather than on an embedding table of tokens fortunes never uses, so the
# sample reads as words.
set -eu
cd "$(dirname "$0")/.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
DATA=data/fortunes-bpe1024
echo "== 1/4 data: /usr/share/games/fortunes/*.u8 -> $DATA (a 1024-id BPE vocabulary trained on them)"
if [ ! -f $DATA/manifest.json ]; then
    $MPIRUN -np 2 ./llmprep --train-vocab 1024 --out $DATA \
        --val-fraction 0.02 --doc-separator '\n%\n' /usr/share/games/fortunes/*.u8
fi
echo "== 2/4 train: mpirun -np 8 ./llmtrain inputs/demo.nml (dp 2 x tp 2 x pp 2, a few minutes)"
rm -rf runs/demo
$MPIRUN -np 8 ./llmtrain inputs/demo.nml | grep --line-buffered -E '^(step|val|grid|model|batch|pipeline|memory|checkpoint|dp all)'
weights=$(ls runs/demo/weights_step*.h5 | tail -1)
echo "== 3/4 generate: 96 tokens after a prompt, from the trained weights ($weights)"
cat >runs/demo/generate.nml <<NML
&run name = 'demo-generate', mode = 'generate', init_from = '$weights'
     prompt = 'The meaning of life is', max_new_tokens = 96, temperature = 0.7, top_k = 40 /
&model n_layer = 4, n_head = 4, d_model = 128, d_ff = 512, vocab_size = 1024, seq_len = 128 /
&data tokenizer = '$DATA/tokenizer.tiktoken' /
NML
$MPIRUN -np 1 ./llmtrain runs/demo/generate.nml | sed -n '/^generate: text:/,$p'
echo
echo "== 4/4 report: ./llmreport runs/demo --out runs/demo/report.html"
./llmreport runs/demo --out runs/demo/report.html
echo "Open runs/demo/report.html (loss curve, throughput, time split); the plots are also in"
echo "runs/demo/report_files/, the numbers in runs/demo/metrics.jsonl, the checkpoints in runs/demo/."
