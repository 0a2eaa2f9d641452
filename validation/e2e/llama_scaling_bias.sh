#!/usr/bin/env bash
# Llama 3.1's RoPE frequencies (&model rope_scaling = 'llama3') and Qwen 2's q/k/v biases (&model
# qkv_bias) against the independent PyTorch model of validation/reference/llama_reference.py
# (float64; its llama3 frequencies written from Meta's apply_scaling / Hugging Face's
# _compute_llama3_parameters): a tiny random Llama (2 layers, d_model 64, 4 heads, 2 kv heads,
# head size 16, rope_theta 5e5 so the 8 frequencies fall in all three llama3 bands with
# rope_original_max_positions 64) with biases on q, k, v only: step-0 loss rel. <= 1e-5, every
# gradient (the biases' included) rel. L2 <= 1e-4, losses and gradient norms of 8 AdamW steps rel.
# <= 1e-4 (the biases nonzero after the first). Then the training path's step-0 gradients on tp 2
# x pp 2 (kv heads and their biases split) and tp 4 (2 kv heads and their biases replicated over 4
# ranks) against the same reference, and 4 steps of ZeRO-3 on dp 2 x tp 2 (losses and gradient
# norms); GPT-2's fused qkv with qkv_bias alone, 4 steps. A seq_len above &model sliding_window is
# refused naming both.
source "$(dirname "$0")/lib.bash"
KEYS="arch = 'llama', n_kv_head = 2, rope_theta = 500000, qkv_bias = .true., rope_scaling = 'llama3', rope_scaling_factor = 8, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_max_positions = 64"

model_nml() { # PATH [write_tiny_nml key=value ...]
    local path=$1; shift
    write_tiny_nml "$path" "$@"
    sed -i "s/seq_len = 32/seq_len = 32, $KEYS/" "$path"
}

echo "== serial: llama3 frequencies, q/k/v biases, 8 steps"
model_nml "$TEST_DIR/ser.nml" name=ser max_steps=8 warmup=2 val_every=0
mkdir -p "$TEST_DIR/ser.dump"
build/ref/gpt_dump "$TEST_DIR/ser.nml" "$TEST_DIR/ser.dump" >/dev/null || fail "gpt_dump failed"
$MPIRUN -np 1 ./llmtrain "$TEST_DIR/ser.nml" >"$TEST_DIR/ser.log" 2>&1 || { tail "$TEST_DIR/ser.log"; fail "llmtrain failed"; }
h5diff "$TEST_DIR/ser.dump/weights.h5" "$TEST_DIR/ser/weights_step000000.h5" /model /model ||
    fail "llmtrain's step-0 weights differ from the dumped ones"
for n in q k v; do h5ls "$TEST_DIR/ser.dump/weights.h5/model/h.1.attn.$n.b" >/dev/null || fail "no h.1.attn.$n.b"; done
h5ls "$TEST_DIR/ser.dump/weights.h5/model/h.1.attn.proj.b" >/dev/null 2>&1 && fail "qkv_bias registered attn.proj.b"
$PYTHON validation/reference/llama_reference.py --nml "$TEST_DIR/ser.nml" --dump "$TEST_DIR/ser.dump" \
    --metrics "$TEST_DIR/ser/metrics.jsonl" || fail "differs from the PyTorch reference"

echo "== GPT-2's fused qkv with bias = .false., qkv_bias = .true. (attn.qkv.b alone), 4 steps"
write_tiny_nml "$TEST_DIR/fused.nml" name=fused max_steps=4 warmup=2 val_every=0
sed -i "s/seq_len = 32/seq_len = 32, bias = .false., qkv_bias = .true./" "$TEST_DIR/fused.nml"
mkdir -p "$TEST_DIR/fused.dump"
build/ref/gpt_dump "$TEST_DIR/fused.nml" "$TEST_DIR/fused.dump" >/dev/null || fail "gpt_dump (fused) failed"
$MPIRUN -np 1 ./llmtrain "$TEST_DIR/fused.nml" >"$TEST_DIR/fused.log" 2>&1 || { tail "$TEST_DIR/fused.log"; fail "llmtrain (fused) failed"; }
$PYTHON validation/reference/llama_reference.py --nml "$TEST_DIR/fused.nml" --dump "$TEST_DIR/fused.dump" \
    --metrics "$TEST_DIR/fused/metrics.jsonl" || fail "fused qkv with qkv_bias differs from the PyTorch reference"

grid() { # NAME NP GRID
    local nml=$TEST_DIR/$1.nml
    model_nml "$nml" name="$1" max_steps=1 warmup=3 val_every=0 mb=2 gb=8 "dp=$3" extra_train="dump_grads_step = 0"
    $MPIRUN -np "$2" ./llmtrain "$nml" >"$TEST_DIR/$1.log" 2>&1 || { tail -20 "$TEST_DIR/$1.log"; fail "$1 failed"; }
    step0_dump "$TEST_DIR/$1" "$TEST_DIR/$1.dump"
    $PYTHON validation/reference/llama_reference.py --nml "$nml" --dump "$TEST_DIR/$1.dump" ||
        fail "$1: the training path differs from the PyTorch reference"
}
echo "== training path on tp 2 x pp 2 (kv heads and biases split)"
grid tp2pp2 4 "1, tp = 2, pp = 2"
echo "== training path on tp 4 (2 kv heads and their biases replicated over 4 ranks)"
grid tp4 4 "1, tp = 4"

echo "== ZeRO-3 on dp 2 x tp 2: 4 AdamW steps against the reference"
model_nml "$TEST_DIR/zero.nml" name=zero max_steps=4 warmup=2 val_every=0 "dp=2, tp = 2, zero_stage = 3"
$MPIRUN -np 4 ./llmtrain "$TEST_DIR/zero.nml" >"$TEST_DIR/zero.log" 2>&1 || { tail -20 "$TEST_DIR/zero.log"; fail "zero failed"; }
$PYTHON validation/reference/llama_reference.py --nml "$TEST_DIR/zero.nml" --dump "$TEST_DIR/ser.dump" \
    --metrics "$TEST_DIR/zero/metrics.jsonl" || fail "ZeRO-3 on dp 2 x tp 2 differs from the PyTorch reference"

echo "== seq_len above sliding_window is refused"
model_nml "$TEST_DIR/sw.nml" name=sw max_steps=1
sed -i "s/seq_len = 32,/seq_len = 32, sliding_window = 16,/" "$TEST_DIR/sw.nml"
$MPIRUN -np 1 ./llmtrain "$TEST_DIR/sw.nml" >"$TEST_DIR/sw.log" 2>&1; rc=$?
[ $rc -eq 2 ] || { tail -5 "$TEST_DIR/sw.log"; fail "seq_len 32 > sliding_window 16: exit $rc, expected 2"; }
grep "error:" "$TEST_DIR/sw.log" | grep "seq_len = 32" | grep -q "sliding_window = 16" ||
    { cat "$TEST_DIR/sw.log"; fail "the refusal does not name seq_len and sliding_window"; }
grep -m1 "error:" "$TEST_DIR/sw.log"
echo "PASS"
