#!/usr/bin/env bash
# bf16 and fp16 (emulated on the CPU by rounding where a GPU stores low precision: the weights
# copy of the fp32 master weights, every activation saved for backward, the gradients before
# their reduction; fp32 arithmetic in between) train the tiny model like fp32: over 200 steps
# every loss within 5e-3 (bf16) and 2e-3 (fp16) relative of the fp32 run's, and the curves are
# not identical (the rounding happens: mean relative difference above 1e-6). fp16 runs with the
# dynamic loss scaler and must not overflow here. Then the composition: fp16 with ZeRO-2 on
# dp 2 x pp 2 (1F1B, accumulation) and bf16 with ZeRO-3 and full recomputation on dp 2 x tp 2
# stay within the same tolerances of their fp32 twins over 30 steps.
source "$(dirname "$0")/lib.bash"
nml() { # name precision max_steps parallel
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel ${4:-dp = 1} /
&train max_steps = $3, micro_batch = 2, global_batch = 8, lr = 3e-3, warmup_steps = 5,
       precision = '$2' /
&data train_files = 'data/tiny/train_*.bin' /
&log every = 50 /
NML
}
run() { timeout 300 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 || { tail "$TEST_DIR/$1.log"; fail "$1 failed"; }; }
compare() { # reference run tolerance
    $PYTHON - "$TEST_DIR/$1/metrics.jsonl" "$TEST_DIR/$2/metrics.jsonl" "$3" "$2" <<'PY'
import json, sys
ref, run, tol, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
L = lambda p: [json.loads(l) for l in open(p) if '"loss"' in l]
a, b = L(ref), L(run)
rel = [abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(b, a)]
mean = sum(rel) / len(rel)
over = sum(1 for x in b if x.get("overflow"))
print("%s: %d steps, worst loss rel.diff %.2e (tol %g), mean %.2e, final %.5f vs fp32 %.5f, %d overflows"
      % (name, len(rel), max(rel), tol, mean, b[-1]["loss"], a[-1]["loss"], over))
sys.exit(0 if len(a) == len(b) and max(rel) <= tol and mean > 1e-6 and over == 0 else 1)
PY
}
for p in fp32 bf16 fp16; do nml tiny_$p $p 200 && run tiny_$p 1; done
compare tiny_fp32 tiny_bf16 5e-3 || fail "bf16 left the fp32 curve (or was not rounded at all)"
compare tiny_fp32 tiny_fp16 2e-3 || fail "fp16 left the fp32 curve (or was not rounded at all)"
grep -q "loss scaling: 0 overflowing steps skipped" "$TEST_DIR/tiny_fp16.log" || fail "fp16: unexpected overflows"

par1="dp = 2, pp = 2, zero_stage = 2"
par2="dp = 2, tp = 2, zero_stage = 3, recompute = 'full'"
nml z2_fp32 fp32 30 "$par1" && run z2_fp32 4
nml z2_fp16 fp16 30 "$par1" && run z2_fp16 4
compare z2_fp32 z2_fp16 2e-3 || fail "fp16 with ZeRO-2 on (2,1,2) left the fp32 curve"
nml z3_fp32 fp32 30 "$par2" && run z3_fp32 4
nml z3_bf16 bf16 30 "$par2" && run z3_bf16 4
compare z3_fp32 z3_bf16 5e-3 || fail "bf16 with ZeRO-3 and recomputation on (2,2,1) left the fp32 curve"
