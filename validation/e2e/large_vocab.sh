#!/usr/bin/env bash
# A vocabulary past 65,536 on llm.c's version-2 shards (uint32 ids), written here by numpy, not by
# llmtrain: the synthetic language of data/tiny with its 500 ids spread over [37, 69897]
# (id -> 140 id + 37), vocab_size = 70000 (padded 70016), GPT-2 style, d_model 32, 2 layers,
# seq_len 16, 5 steps.
#  1. The serial run against the PyTorch reference (float64, validation/reference/gpt_reference.py,
#     reading the same shards with numpy): step-0 loss rel. <= 1e-5, every step-0 gradient rel. L2
#     <= 1e-4 (wte's 70016 rows included), 5 losses and gradient norms rel. <= 1e-4.
#  2. The same run on tp 2 (the vocabulary-parallel head: ids >= 35008 are rank 1's rows) equals
#     the serial run: losses and gradient norms within 1e-5 relative.
#     Greedy generation from the trained weights (prompt ids 69897 37 65697) on tp 1 and tp 2
#     prints the same continuation.
#  3. Bad input, 2 ranks, exit 2 and one message naming the file: a version-2 header over a uint16
#     body (the header's version field), an id >= vocab_size in a version-2 shard.
#  4. llmtrain --plan with vocab_size 128256 states the logits per micro-batch (computed here).
source "$(dirname "$0")/lib.bash"
ulimit -c 0
D=$TEST_DIR
$PYTHON - "$D" <<'PY' || fail "writing the version-2 shards"
import numpy as np, sys
d = sys.argv[1]
def shard(path, ids, version=2, body=np.uint32):
    h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, version, len(ids)
    open(path, "wb").write(h.tobytes() + np.asarray(ids, body).tobytes())
tok = np.fromfile("data/tiny/train_000.bin", np.uint16)[512:].astype(np.int64)  # after the header
wide = 140 * tok[:6000] + 37                       # 500 ids spread over [37, 69897]
assert wide.max() > 65535 and wide.max() < 70000
shard(f"{d}/big_000.bin", wide[:3000])
shard(f"{d}/big_001.bin", wide[3000:])
shard(f"{d}/u16body_000.bin", tok[:3000], 2, np.uint16)   # version 2 says uint32, body is uint16
bad = wide[:3000].copy(); bad[1234] = 70000
shard(f"{d}/bad_000.bin", bad)
PY

vocab_nml() { # name tp [extra &train keys] [train_files]
    cat >"$D/$1.nml" <<NML
&run name = '$1', out_dir = '$D', seed = 11 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 70000, seq_len = 16 /
&parallel tp = $2 /
&train max_steps = 5, micro_batch = 2, global_batch = 4, lr = 3e-3, min_lr = 3e-4, warmup_steps = 2,
       lr_schedule = 'cosine', grad_clip = 1.0 ${3:-} /
&data train_files = '${4:-$D/big_*.bin}' /
&log every = 1 /
NML
}
vocab_nml serial 1 ", dump_grads_step = 0"
vocab_nml tp2 2
timeout 120 $MPIRUN -np 1 ./llmtrain "$D/serial.nml" >"$D/serial.log" 2>&1 || { tail -20 "$D/serial.log"; fail "serial run"; }
step0_dump "$D/serial" "$D/dump"
$PYTHON validation/reference/gpt_reference.py --nml "$D/serial.nml" --dump "$D/dump" \
    --metrics "$D/serial/metrics.jsonl" || fail "the serial run on version-2 shards differs from PyTorch"

timeout 120 $MPIRUN -np 2 ./llmtrain "$D/tp2.nml" >"$D/tp2.log" 2>&1 || { tail -20 "$D/tp2.log"; fail "tp 2 run"; }
[ "$(losses "$D/tp2/metrics.jsonl" | wc -l)" -eq 5 ] || fail "tp 2: expected 5 losses"
same_series "tp 2 vs serial, losses" 1e-5 <(losses "$D/serial/metrics.jsonl") <(losses "$D/tp2/metrics.jsonl") ||
    fail "tp 2 losses differ from the serial run"
same_series "tp 2 vs serial, gradient norms" 1e-5 <(norms "$D/serial/metrics.jsonl") <(norms "$D/tp2/metrics.jsonl") ||
    fail "tp 2 gradient norms differ from the serial run"

for tp in 1 2; do # greedy generation from the trained weights: ids past 65535, the same on tp 1 and 2
    cat >"$D/gen$tp.nml" <<NML
&run name = 'gen$tp', out_dir = '$D', mode = 'generate', init_from = '$D/serial/weights_step000005.h5',
     prompt_ids = 69897, 37, 65697, max_new_tokens = 6, temperature = 0 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 70000, seq_len = 16 /
&parallel tp = $tp /
NML
    timeout 60 $MPIRUN -np $tp ./llmtrain "$D/gen$tp.nml" >"$D/gen$tp.log" 2>&1 || { tail -5 "$D/gen$tp.log"; fail "generate on tp $tp"; }
done
g1=$(grep "generate: continuation" "$D/gen1.log") g2=$(grep "generate: continuation" "$D/gen2.log")
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "greedy generation differs: tp 1 '$g1', tp 2 '$g2'"
echo "generation, tp 1 = tp 2: $g1"

vocab_nml width 2 "" "$D/u16body_000.bin"
check_case header_width_disagrees "u16body_000.bin: header version 2 announces 3000 uint32 ids" "$D/width.nml"
grep -qF "the header's version field disagrees" "$D/header_width_disagrees.err" || fail "no word of the version field"
vocab_nml badid 2 "" "$D/bad_000.bin"
check_case v2_id_past_vocab "bad_000.bin: token 70000 at position 1234 (token index in the shard) is >= &model vocab_size = 70000" "$D/badid.nml"
# 4. --plan with Llama 3's vocabulary states the logits of a micro-batch: 4 x 1024 x 128256 / 2 floats
cat >"$D/plan.nml" <<NML
&model n_layer = 2, n_head = 4, d_model = 64, vocab_size = 128256, seq_len = 1024 /
&train micro_batch = 4, global_batch = 8 /
&parallel tp = 2 /
&data train_files = '$D/big_*.bin' /
NML
./llmtrain --plan "$D/plan.nml" >"$D/plan.log" 2>&1
want=$(awk 'BEGIN {printf "%.1f", 4 * 1024 * 128256 / 2 * 4 / 1048576}')
grep -F "logits per micro-batch (fp32, the last stage's activations): micro_batch x seq_len x padded vocabulary / tp = 4 x 1024 x 128256 / 2 = $want MiB per rank" "$D/plan.log" ||
    { cat "$D/plan.log"; fail "--plan does not state the logits ($want MiB)"; }
echo "--plan, vocab_size 128256: logits $want MiB per rank and micro-batch"
echo "large vocabulary on version-2 shards: PyTorch, tp 2 and bad input all agree"
