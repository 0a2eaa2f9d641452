#!/usr/bin/env bash
# &run init_from at another context length (fine-tuning), 2 ranks (tp 2) unless said:
#  1. a GPT-2 tiny model trained at seq_len 64 (learned positions), then init_from at seq_len 32:
#     runs, the note "cropped from 64 to 32 positions" is printed, the loaded weights (its step-0
#     weights file) equal the trained file with wpe cropped by h5py bit for bit, and PyTorch
#     (validation/reference/gpt_reference.py, float64) on those h5py-cropped weights gives the
#     step-0 loss (rel. <= 1e-5), every step-0 gradient (rel. L2 <= 1e-4) and 3 steps' losses and
#     gradient norms (rel. <= 1e-4). The same on pp 2 gives the same losses (rel. <= 1e-5); on
#     dp 2 with ZeRO-3, and ZeRO-1 with bf16 weights (each rank reads its partition), the step-0
#     weights equal the h5py-cropped file bit for bit and ZeRO-3's losses tp 2's (rel. <= 1e-5),
#     its gradient norms too (rel. <= 1e-4).
#  2. init_from at seq_len 128 from that 64-position file: exit 2, one message naming seq_len, 64
#     and 128.
#  3. a Llama-style model (arch = 'llama': RoPE, no position table) trained at seq_len 32, then
#     init_from at seq_len 64: runs, its note printed, its step-0 weights equal the file's bit for
#     bit, and its first loss is within 3% of the same weights' first loss at seq_len 32 (the same
#     model on longer windows of the same data; an untrained model is 6% above).
#     With another rope_theta in the namelist, a note names the file's (10000) and the one used.
#  4. resume (not init_from) of a seq_len-64 checkpoint at seq_len 32: still refused, exit 2,
#     naming seq_len.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
D=$TEST_DIR
nml() { # name seq_len steps arch init_from [extra &train keys] [extra &checkpoint keys] [extra &model keys]
    cat >"$D/$1.nml" <<NML
&run name = '$1', out_dir = '$D', seed = 5, init_from = '$5' /
&model arch = '$4', n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = $2 ${8:-} /
&parallel tp = 2 /
&train max_steps = $3, micro_batch = 2, global_batch = 4, lr = 3e-3, min_lr = 3e-4, warmup_steps = 1,
       lr_schedule = 'cosine', grad_clip = 1.0 ${6:-} /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint ${7:-} /
&log every = 1 /
NML
}
run() { # name
    timeout 120 $MPIRUN -np 2 ./llmtrain "$D/$1.nml" >"$D/$1.log" 2>&1 || { tail -20 "$D/$1.log"; fail "$1 exited non-zero"; }
}

echo "== 1. learned positions: 64 -> 32"
nml base64 64 4 gpt2 "" "" "every = 4"
run base64
W=$D/base64/weights_step000004.h5
[ -f "$W" ] || fail "no final weights file $W"
nml crop32 32 3 gpt2 "$W" ", dump_grads_step = 0"
run crop32
grep -F "init_from: $W has learned positions for seq_len = 64: the position table (wpe) is cropped from 64 to 32 positions" \
    "$D/crop32.log" || { cat "$D/crop32.log"; fail "no crop note"; }
mkdir -p "$D/dump"
$PYTHON - "$W" "$D/dump/weights.h5" 32 <<'PY' || fail "cropping with h5py"
import h5py, sys
src, dst, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
    g = b.create_group("model")
    for n, d in a["model"].items():
        g.create_dataset(n, data=d[:T] if n == "wpe" else d[()])
    assert a["model/wpe"].shape[0] == 64 and g["wpe"].shape[0] == T
PY
same_weights "$D/dump/weights.h5" "$D/crop32/weights_step000000.h5" ||
    fail "the init_from run's step-0 weights differ from the h5py-cropped file"
cp "$D/crop32/grads_step000000.h5" "$D/dump/grads.h5"
losses "$D/crop32/metrics.jsonl" | head -1 >"$D/dump/loss.txt"
$PYTHON validation/reference/gpt_reference.py --nml "$D/crop32.nml" --dump "$D/dump" \
    --metrics "$D/crop32/metrics.jsonl" || fail "the cropped run differs from PyTorch on the h5py-cropped weights"

sed -e "s/tp = 2/pp = 2/" -e "s/name = 'crop32'/name = 'crop32pp'/" "$D/crop32.nml" >"$D/crop32pp.nml"
run crop32pp # wpe is the first stage's alone: the others read none of it
same_series "pp 2 vs tp 2, losses" 1e-5 <(losses "$D/crop32/metrics.jsonl") <(losses "$D/crop32pp/metrics.jsonl") ||
    fail "the cropped run on pp 2 differs from tp 2"

# ZeRO: each dp rank reads its partition; the one whose range ends the layout reads the whole
# table and sends the kept rows to the rank that holds wpe (ZeRO-3 fp32; ZeRO-1 with bf16 weights,
# whose master takes the file's values)
for z in "3:" "1:precision = 'bf16', "; do
    name=crop32z${z%%:*}
    sed -e "s/tp = 2/dp = 2, zero_stage = ${z%%:*}/" -e "s/max_steps = /${z#*:}max_steps = /" \
        -e "s/name = 'crop32'/name = '$name'/" -e "s/, dump_grads_step = 0//" "$D/crop32.nml" >"$D/$name.nml"
    run $name
    same_weights "$D/dump/weights.h5" "$D/$name/weights_step000000.h5" ||
        fail "$name: the step-0 weights differ from the h5py-cropped file"
done
same_series "ZeRO-3 dp 2 vs tp 2, losses" 1e-5 <(losses "$D/crop32/metrics.jsonl") <(losses "$D/crop32z3/metrics.jsonl") ||
    fail "the cropped run on dp 2 with ZeRO-3 differs from tp 2"
same_series "ZeRO-3 dp 2 vs tp 2, gradient norms" 1e-4 <(norms "$D/crop32/metrics.jsonl") <(norms "$D/crop32z3/metrics.jsonl") ||
    fail "the cropped run on dp 2 with ZeRO-3 has other gradient norms than tp 2"

echo "== 2. learned positions: 64 -> 128 is refused"
nml long128 128 3 gpt2 "$W"
check_case init_from_longer "&run init_from: checkpoint $W was written for &model seq_len = 64, shorter than the namelist's seq_len = 128" "$D/long128.nml"

echo "== 3. RoPE: 32 -> 64"
nml rope32 32 4 llama ""
run rope32
R=$D/rope32/weights_step000004.h5
nml rope64 64 2 llama "$R"
run rope64
grep -F "init_from: $R was written for seq_len = 32; RoPE has no position table: training at seq_len = 64" "$D/rope64.log" ||
    { cat "$D/rope64.log"; fail "no RoPE note"; }
same_weights "$R" "$D/rope64/weights_step000000.h5" || fail "the RoPE model at seq_len 64 did not load the file's weights exactly"
nml rope32again 32 2 llama "$R"
run rope32again
l64=$(losses "$D/rope64/metrics.jsonl" | head -1) l32=$(losses "$D/rope32again/metrics.jsonl" | head -1)
awk -v a="$l64" -v b="$l32" 'BEGIN {e = (a - b) / b; if (e < 0) e = -e; printf "first loss at seq_len 64 %s, at 32 %s: rel. %.3f (tol 0.03)\n", a, b, e; exit !(e <= 0.03 && a > 0)}' ||
    fail "the RoPE model at seq_len 64 does not start where it left off"

nml theta 64 1 llama "$R" "" "" ", rope_theta = 20000"
run theta
grep -F "init_from: $R was trained with rope_theta = 10000; this run uses the namelist's rope_theta = 20000" "$D/theta.log" ||
    { cat "$D/theta.log"; fail "no note of the file's rope_theta"; }

echo "== 4. resume keeps the strict check"
nml resume32 32 8 gpt2 "" "" "resume = '$D/base64/ckpt_step00000004.h5'"
check_case resume_other_seq_len "was written for &model seq_len = 64, but the namelist has seq_len = 32" "$D/resume32.nml"
echo "init_from at another seq_len: cropped (PyTorch agrees), longer refused, RoPE any length, resume strict"
