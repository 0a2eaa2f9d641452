#!/usr/bin/env bash
# demo.sh — `make demo` (after the Makefile has installed what is missing and built):
# tokenise the Debian `fortunes` collection with the GPT-2 vocabulary (llmprep on 2 ranks), train
# inputs/demo.nml on a dp 2 x tp 2 x pp 2 grid (8 ranks), show the loss going down and a sample.
set -eu
cd "$(dirname "$0")/.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
echo "== 1/3 data: /usr/share/games/fortunes/*.u8 -> data/fortunes (GPT-2 BPE, llm.c shards)"
if [ ! -f data/fortunes/manifest.json ]; then
    $MPIRUN -np 2 ./llmprep --tokenizer data/gpt2/gpt2.tiktoken --out data/fortunes \
        --val-fraction 0.02 --doc-separator '\n%\n' /usr/share/games/fortunes/*.u8
fi
echo "== 2/3 train: mpirun -np 8 ./llmtrain inputs/demo.nml (dp 2 x tp 2 x pp 2, about 5 minutes)"
rm -rf runs/demo
$MPIRUN -np 8 ./llmtrain inputs/demo.nml | grep --line-buffered -E '^(step|val|grid|model|batch|pipeline|memory|checkpoint|dp all)'
echo "== 3/3 generate: 48 tokens after a prompt, from the trained weights"
cat >runs/demo/generate.nml <<NML
&run name = 'demo-generate', mode = 'generate', init_from = 'runs/demo/weights_step000120.h5'
     prompt = 'The meaning of life is', max_new_tokens = 48, temperature = 0.8, top_k = 40 /
&model n_layer = 4, n_head = 4, d_model = 128, d_ff = 512, vocab_size = 50257, seq_len = 64 /
&data tokenizer = 'data/fortunes/tokenizer.tiktoken' /
NML
$MPIRUN -np 1 ./llmtrain runs/demo/generate.nml | sed -n '/^generate: text:/,$p'
echo
echo "Loss curve: runs/demo/metrics.jsonl (one JSON object per step); checkpoints: runs/demo/."
