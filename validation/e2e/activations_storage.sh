#!/usr/bin/env bash
# The activations a bf16/fp16 run saves for backward, kept in 16-bit storage (&train
# activations_storage = '16bit': each block's ln1, qkv, attention output, res2, ln2 and MLP
# tensors as 2-byte elements, computed in one fp32 working set shared by all blocks, packed after
# the block's forward and unpacked before its backward) compute exactly what the fp32 arrays of the
# same rounded values compute (activations_storage = 'fp32', the emulation the rest of the suite
# checks against fp32 and PyTorch): for each configuration the step records (loss, lr, grad norm,
# val loss) and the final weights must be bit-identical. A tensor not unpacked before its backward
# (the working set then holds the last forward block's), one unpacked with the wrong length, a
# split backward's W reading a packed input it did not unpack, or a recomputation reading a
# packed tensor before the unpack changes every gradient norm. The configurations reach every
# saved tensor and every path that reads them: GPT-2; fp16 with its loss scaler on dp 2; Llama
# (separate q, k, v after RoPE, SwiGLU's up projection, RMSNorm) with replicated k/v heads on tp
# 4; MoE on ep 2 (the router reads ln2 packed; the experts' tensors stay fp32 per slot); ZB-H1 on
# pp 2 (W unpacks its inputs), also with selective recomputation of the first block (copied and
# packed inputs in one queue); an interleaved pipeline with selective recomputation (4 slots of
# one working set); full recomputation of one of two blocks; 1F1B on (dp 1, tp 2, pp 2) with
# dropout; ZeRO-3; the weights copy also in 16-bit storage; and LLMT_DEVSIM=1 (the packing on
# the simulated device); their validation passes, and generation, pack nothing (forward only).
# Activation memory is measured = planned and falls to about 60% of the fp32 arrays' on a
# 6-block model; the planner offers 16-bit storage as an alternative of a bf16 run on the CPU;
# '16bit' in an fp32 run is refused (exit 2, one message).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash" # MOE_KEYS
ulimit -c 0
write_tiny_nml "$TEST_DIR/t.nml" name=r max_steps=4 mb=2 gb=8 val_every=2
echo "&checkpoint every = 4 /" >>"$TEST_DIR/t.nml"
# check NAME NP [overrides]: the run with both storages; the records and final weights identical
check() { storage_pair activations_storage activations "$@"; }
BF16=train.precision="'bf16'"
check gpt2_bf16 1 "$BF16" model.n_layer=3
check fp16_dp2 2 train.precision="'fp16'" parallel.dp=2
check llama_kvrep 4 "$BF16" model.arch="'llama'" model.n_kv_head=2 parallel.tp=4
check moe_ep2 2 "$BF16" parallel.dp=2 parallel.ep=2 "${MOE_KEYS[@]}"
check zbh1_pp2 2 "$BF16" model.n_layer=4 parallel.pp=2 parallel.schedule="'zb-h1'"
check zbh1_select 2 "$BF16" model.n_layer=4 parallel.pp=2 parallel.schedule="'zb-h1'" \
    parallel.recompute="'selective'" parallel.recompute_layers=1
check interleaved 2 "$BF16" model.n_layer=4 parallel.pp=2 parallel.schedule="'interleaved'" \
    parallel.virtual_stages=2 parallel.recompute="'selective'"
check full_1of2 1 "$BF16" parallel.recompute="'full'" parallel.recompute_layers=1
check 1f1b_tp2pp2 4 "$BF16" model.n_layer=4 parallel.tp=2 parallel.pp=2 parallel.schedule="'1f1b'" \
    model.dropout=0.1
check zero3_dp2 2 "$BF16" parallel.dp=2 parallel.zero_stage=3
check weights16 1 "$BF16" train.weights_storage="'16bit'"
LLMT_DEVSIM=1 check devsim_dp2 2 "$BF16" parallel.dp=2
grep -q '^compute: cpu-devsim backend' "$TEST_DIR/devsim_dp2-16bit.log" || fail "devsim: the simulated device was not used"

# generation (forward-only passes: nothing packed) from the bf16 run's weights: the same tokens
storage_generate activations_storage "$TEST_DIR/gpt2_bf16-fp32/r/weights_step000004.h5" "$BF16" \
    model.n_layer=3

# memory: the activations category (rank 0's measured/planned) of a 6-block bf16 run: each
# block's saved tensors (16 C per token: 15 C packed, the block output fp32) at 2 bytes instead
# of 4, the slot's input and gradient fp32 as before: ~0.56 of the fp32 arrays' here
for a in 16bit fp32; do
    timeout 300 $MPIRUN -np 1 ./llmtrain "$TEST_DIR/t.nml" run.out_dir="'$TEST_DIR/mem-$a'" "$BF16" \
        model.n_layer=6 train.max_steps=1 train.activations_storage="'$a'" >"$TEST_DIR/mem-$a.log" 2>&1 ||
        { tail -20 "$TEST_DIR/mem-$a.log"; fail "memory run ($a)"; }
done
acts_col() { awk '/rank \(dp,tp,pp\)/ {getline; print $7; exit}' "$1"; }
head_col() { awk '/rank \(dp,tp,pp\)/ {print $7; exit}' "$1"; }
[ "$(head_col "$TEST_DIR/mem-fp32.log")" = activations ] || fail "the memory table's 7th column is not activations"
a16=$(acts_col "$TEST_DIR/mem-16bit.log") a32=$(acts_col "$TEST_DIR/mem-fp32.log")
$PYTHON - "$a16" "$a32" <<'PY' || fail "activation memory not as planned, or not reduced"
import sys
(m16, pl16), (m32, pl32) = [tuple(map(float, a.split("/"))) for a in sys.argv[1:3]]
print(f"activations  measured/planned MiB: 16-bit {m16}/{pl16}, fp32 arrays {m32}/{pl32}: "
      f"{m16 / m32:.2f}")
sys.exit(0 if m16 == pl16 and m32 == pl32 and 0.5 < m16 / m32 < 0.65 else 1)
PY
# the planner: a bf16 run on the CPU ('auto': fp32 arrays) is offered 16-bit storage as an
# alternative: for each (zero, recompute, micro_batch) a '16bit' row that plans less memory and a
# longer step (the packing passes) than its 'fp32' row, and the row's total is what --plan says
# of that configuration itself (GPT-2 124M's shape, T = 1024: --plan builds no model)
cat >"$TEST_DIR/plan.nml" <<'NML'
&run name = 'p', out_dir = '/tmp' /
&model n_layer = 12, n_head = 12, d_model = 768, d_ff = 3072, vocab_size = 50257, seq_len = 1024 /
&train max_steps = 1, micro_batch = 8, global_batch = 8, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
&log peak_flops = 1e12 /
NML
./llmtrain --plan "$TEST_DIR/plan.nml" >"$TEST_DIR/plan.out" 2>&1 || { cat "$TEST_DIR/plan.out"; fail "--plan exited non-zero"; }
./llmtrain --plan "$TEST_DIR/plan.nml" train.activations_storage="'16bit'" >"$TEST_DIR/plan16.out" 2>&1 ||
    { cat "$TEST_DIR/plan16.out"; fail "--plan (16bit) exited non-zero"; }
grep -q "x activation storage" "$TEST_DIR/plan.out" || fail "the plan's alternatives do not try the activation storage"
total16=$(sed -n 's/^  the fullest rank .*; total \([0-9.]*\) MiB$/\1/p' "$TEST_DIR/plan16.out")
$PYTHON - "$TEST_DIR/plan.out" "$total16" <<'PY' || fail "the planner's 16-bit alternatives"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 7 and f[0].isdigit() and f[6] in ("fp32", "16bit"):
        rows[(f[0], f[1], f[2], f[6])] = (float(f[4]), float(f[5]))
pairs = [(k[:3], v, rows[k[:3] + ("16bit",)]) for k, v in rows.items()
         if k[3] == "fp32" and k[:3] + ("16bit",) in rows]
assert pairs, f"no pair of rows in {rows}"
for k, (g32, s32), (g16, s16) in pairs:
    assert g16 < g32 and s16 > s32, (k, g32, s32, g16, s16)
g, _ = rows[("0", "none", "8", "16bit")]
mine = float(sys.argv[2]) / 1024
assert abs(g - mine) < 0.0015, (g, mine)
print(f"planner: {len(pairs)} (zero, recompute, mb) with both storages, 16-bit always smaller and "
      f"slower; (0, none, 8): {rows[('0', 'none', '8', 'fp32')][0]} -> {g} GiB = --plan's {mine:.3f}")
PY
# '16bit' without a 16-bit activation type (fp32) is refused: one message, exit 2
write_tiny_nml "$TEST_DIR/bad.nml" extra_train="activations_storage = '16bit'"
check_case fp32_16bit "activations_storage = '16bit' needs a 16-bit activation type" "$TEST_DIR/bad.nml" 1
echo "PASS"
