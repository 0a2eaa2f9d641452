#!/usr/bin/env bash
# The GPU validation script (validation/gpu/run.sh) rehearsed on this machine, so that the one short
# run a GPU session gets is not spent on a typo: LLMT_GPU_REHEARSAL=1 runs every step that does not
# need a GPU with the CPU build (device = 'cpu' where 'cuda' would be, tiny shapes in steps 4 and 5,
# PyTorch on the CPU) and the table must come out whole: the 20-step comparison parsed (cpu against
# cpu: 0 difference), PyTorch's tokens/s read from its JSON, llmtrain's median tokens/s and MFU
# read from metrics.jsonl and its ratio to PyTorch eager computed; and with a budget too small
# (LLMT_GPU_BUDGET_S) the run still ends in time with the whole table on disk. Found on the way: the table's
# PyTorch row was printed by an f-string with nested double quotes, a SyntaxError before Python
# 3.12 (this machine has 3.11; the GPU machine's 3.12.3 would have taken it).
source "$(dirname "$0")/lib.bash"
bash -n validation/gpu/run.sh || fail "validation/gpu/run.sh: syntax"
OUT=$TEST_DIR/out
LLMT_GPU_REHEARSAL=1 PYTHON=$PYTHON timeout 600 bash validation/gpu/run.sh "$OUT" >"$TEST_DIR/run.log" 2>&1 ||
    { tail -30 "$TEST_DIR/run.log"; fail "run.sh (rehearsal) exited non-zero"; }
S=$OUT/summary.txt
[ -f "$S" ] || { tail -30 "$TEST_DIR/run.log"; fail "no summary.txt"; }
cat "$S"
# expect PATTERN WHAT: a line of the table matches the extended regex
expect() { grep -Eq "$1" "$S" || fail "summary.txt has no line for $2 (pattern: $1)"; }
expect '^REHEARSAL' "the rehearsal banner"
expect '^GPU opening \(device_probe\) +SKIPPED' "step 1 skipped"
expect '^ops CUDA vs CPU \(test_cuda_ops\) +SKIPPED' "step 2 skipped"
expect '^tiny 20 steps cuda vs cpu +PASS: max rel 0\.00e\+00 over 20 steps' "step 3's comparison"
expect '^tiny bf16 activations 16-bit vs fp32 +PASS: max rel 0\.00e\+00 over 20 steps' "step 3b's comparison"
for m in 124M 350M; do
    expect "^PyTorch GPT-2 $m bf16 T=64 eager +[0-9]+ tok/s, MFU [0-9.]+%" "PyTorch $m eager"
    expect "^PyTorch GPT-2 $m bf16 T=64 compile +([0-9]+ tok/s|FAIL \(torch.compile: not in torch)" "PyTorch $m compile"
    expect "^llmtrain GPT-2 $m bf16 T=64 +[0-9.]+ tok/s, MFU [0-9.]+%, [0-9.]+x PyTorch eager" "llmtrain $m"
done
# the rows are the records' own numbers: llmtrain 124M's tokens/s is the median of steps 6..20
want=$(grep -h '"step":' "$OUT/gpt_124M/metrics.jsonl" | grep '"tokens_per_s"' |
    $PYTHON -c 'import json, statistics, sys
r = [json.loads(l) for l in sys.stdin]
print(statistics.median(x["tokens_per_s"] for x in r if x["step"] >= 6))')
got=$(grep -E '^llmtrain GPT-2 124M' "$S" | grep -Eo '[0-9.]+ tok/s' | cut -d' ' -f1)
awk -v a="$got" -v b="$want" 'BEGIN {exit !(a == b)}' || fail "llmtrain 124M: table $got tok/s, median of the records $want"
[ "$(grep -c . "$S")" -eq 13 ] || fail "summary.txt: $(grep -c . "$S") lines, expected 13 (the header and 12 rows)"
# A step that hangs (PyTorch made to sleep 60 s first) within a budget of 6 s: every step's limit
# is cut to what is left, so the run ends soon after the budget (not after 4 x 60 s), the hung
# steps say FAIL and the table is whole.
OUT2=$TEST_DIR/short
printf '#!/bin/sh\nsleep 60\nexec %s "$@"\n' "$PYTHON" >"$TEST_DIR/slow_python" && chmod +x "$TEST_DIR/slow_python"
t0=$SECONDS
LLMT_GPU_REHEARSAL=1 LLMT_GPU_BUDGET_S=6 PYTHON=$TEST_DIR/slow_python timeout 200 bash validation/gpu/run.sh "$OUT2" \
    >"$TEST_DIR/short.log" 2>&1 || { tail -20 "$TEST_DIR/short.log"; fail "run.sh with a 6 s budget exited non-zero"; }
took=$((SECONDS - t0))
[ "$(grep -c . "$OUT2/summary.txt")" -eq 13 ] || { cat "$OUT2/summary.txt"; fail "a 6 s budget: the table is not whole"; }
[ "$(grep -c '^PyTorch.*FAIL' "$OUT2/summary.txt")" -eq 4 ] || { cat "$OUT2/summary.txt"; fail "a 6 s budget: the hung PyTorch steps are not cut short"; }
[ "$took" -le 40 ] || fail "a 6 s budget took $took s (each step after it should get 1 s)"
echo "run.sh rehearsed: every row of the table parsed (llmtrain 124M $got tok/s = the records' median); hung steps in a 6 s budget: ended in $took s, the table whole"

