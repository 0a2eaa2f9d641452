#!/usr/bin/env bash
# demo.sh — `make demo`: prepare data, train inputs/demo.nml on 2 ranks, show the loss curve and
# a generated sample. (Dependencies and the build are done by the Makefile before this runs.)
set -eu
cd "$(dirname "$0")/.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
echo "== 1/3 data: a synthetic Markov-chain language in llm.c shard format (data/tiny)"
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny
echo "== 2/3 train: mpirun -np 2 ./llmtrain inputs/demo.nml"
$MPIRUN -np 2 ./llmtrain inputs/demo.nml | grep -vE '^  |^/|^&|^----' 
echo "== 3/3 generate: 32 tokens from the trained weights"
cat >runs/demo/generate.nml <<NML
&run name = 'demo-generate', mode = 'generate', init_from = 'runs/demo/weights_step000300.h5'
     prompt_ids = 1, 2, 3, max_new_tokens = 32, temperature = 0.8, top_k = 20 /
&model n_layer = 4, n_head = 4, d_model = 128, d_ff = 512, vocab_size = 500, seq_len = 64 /
NML
$MPIRUN -np 1 ./llmtrain runs/demo/generate.nml | grep '^generate'
echo
echo "The loss curve is in runs/demo/metrics.jsonl (one JSON object per step)."
