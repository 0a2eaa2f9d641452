#!/usr/bin/env bash
# continue_pretraining.sh — the worked example of docs/llmconvert.md ("Continue pretraining a
# Llama-style model from Hugging Face weights on your text"), runnable on a laptop: every step is
# the one a user takes with a real model, on a tiny random one.
#
#   bash inputs/examples/continue_pretraining.sh [WORK_DIR] [TEXT_FILES...]
#
#  1. a Hugging Face model directory: here a tiny random LlamaForCausalLM made by transformers,
#     with a byte-level BPE tokenizer trained by `tokenizers` on the text (with a real model:
#     its own directory, e.g. from huggingface-cli download);
#  2. llmconvert --to hdf5: the weights file, the &model keys and the tokenizer as tiktoken;
#  3. llmprep with that tokenizer: the text as token shards;
#  4. llmtrain with &run init_from = the weights file: a few steps of training;
#  5. llmconvert --to hf: the trained weights and the tokenizer back as a Hugging Face directory;
#  6. transformers' generate on a prompt from the exported directory.
# Needs: ./llmtrain, ./llmprep, ./llmconvert (make tests), .deps/python (make deps: transformers,
# tokenizers, safetensors), torch. WORK_DIR default runs/continue_pretraining; the text default
# docs/*.md. Prints each step; exit 0 when every step worked.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-runs/continue_pretraining}
shift || true
TEXT=("$@")
[ ${#TEXT[@]} -gt 0 ] || TEXT=(docs/*.md)
PYTHON=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
rm -rf "$W" && mkdir -p "$W"

echo "== 1. a Hugging Face Llama and its tokenizer (tiny, random: stands for your download)"
$PYTHON - "$W/hf" "${TEXT[@]}" <<'PY'
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out, files = sys.argv[1], sys.argv[2:]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's regex
tok.decoder = decoders.ByteLevel()
tok.train(files, trainers.BpeTrainer(vocab_size=512, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False))
tok.add_special_tokens(["<|endoftext|>"])  # the id after the last one, as llmtrain's tokenizer has it
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=fast.vocab_size + 1, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  rope_theta=500000.0, tie_word_embeddings=False,
                  bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id)
LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
fast.save_pretrained(out)
print("%s: LlamaForCausalLM (%d ids, 2 layers, d_model 64) and a %d-token byte-level BPE tokenizer"
      % (out, cfg.vocab_size, fast.vocab_size))
PY

echo "== 2. import: llmconvert --to hdf5"
./llmconvert --to hdf5 "$W/hf" "$W/base.h5"

echo "== 3. your text as token shards: llmprep with the converted tokenizer"
./llmprep --tokenizer "$W/base.tiktoken" --out "$W/data" --val-fraction 0.1 --shard-tokens 1000000 "${TEXT[@]}"

echo "== 4. continue pretraining: llmtrain with init_from"
{
    sed -n '/^&model/,/^\//p' "$W/base.nml" | sed 's/seq_len = 64/seq_len = 32/'  # any seq_len: RoPE
    cat <<NML
&run
  name = 'cpt', out_dir = '$W', init_from = '$W/base.h5'
/
&train
  max_steps = 20, micro_batch = 4, global_batch = 8, lr = 3e-3, min_lr = 3e-4, warmup_steps = 2
/
&data
  train_files = '$W/data/train_*.bin', val_files = '$W/data/val_*.bin', val_every = 20, val_batches = 2
  tokenizer = '$W/base.tiktoken'
/
&checkpoint
  every = 20
/
&log
  every = 5
/
NML
} >"$W/cpt.nml"
$MPIRUN -np 2 ./llmtrain "$W/cpt.nml" parallel.dp=2

echo "== 5. export: llmconvert --to hf (weights and the run's tokenizer)"
./llmconvert --to hf "$W/cpt/weights_step000020.h5" "$W/hf_out"

echo "== 6. transformers on the export: generate"
$PYTHON - "$W/hf_out" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
x = tok("The model", return_tensors="pt").input_ids
y = m.generate(x, max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id)
print("%s: %s -> %r" % (d, type(m).__name__, tok.decode(y[0])))
PY
echo "continue_pretraining: done ($W)"
