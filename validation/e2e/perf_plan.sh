#!/usr/bin/env bash
# The performance model's command line (docs/planning.md), on one process, no GPU:
#   --plan --machine with &run device = 'cuda' in this build (the machine file says what the
#   devices are; without --machine the namelist is still refused); --json parsed by Python: the
#   keys, tokens_per_s = global_batch * seq_len / step_s (1e-5), the parts summing to step_s
#   (1e-5); --search 16 --json: candidates best first (step_s ascending), every one fits, with
#   its grid's product 16; a GPT-3-sized model (175B) on 1536 A100s: the search's best grids keep
#   tensor parallelism inside a node (tp 8 = devices_per_node: its all-reduces on NVLink);
#   bad input, exit 2 with one message naming the key: a machine file missing a key, a zero
#   rate, devices per node not dividing the grid, a search where nothing fits (2 GiB devices: the
#   smallest change, 16 devices (the example grid with sequence parallelism on tp 8), found by
#   searching 8, 16), GPT-3 on 8 (the smallest change: 64 devices, where every grid puts more than
#   2^31 parameters on a rank: the search ranks them like any other), --json without --machine;
#   context parallelism: the namelist's dp 2 x cp 2 x tp 2 (text: 'x cp 2', a cp part, the note
#   that the trainer runs the ring on CPU only; JSON: cp 2, a cp part > 0, the parts summing to
#   step_s), cp 3 refused naming seq_len, and a 7B-like model at seq_len 262144 on 16 A100s:
#   --search's best has cp > 1 (test_perfmodel.c: no cp 1 grid of it fits), the text table a
#   cp column.
source "$(dirname "$0")/lib.bash"
M=inputs/machines
cat >"$TEST_DIR/gpt.nml" <<NML
&run name = 'p', out_dir = '$TEST_DIR', device = 'cuda' /
&model n_layer = 24, n_head = 16, d_model = 2048, vocab_size = 50257, seq_len = 2048 /
&parallel dp = 4, tp = 2, pp = 2 /
&train micro_batch = 2, global_batch = 64, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
NML
./llmtrain --plan "$TEST_DIR/gpt.nml" >"$TEST_DIR/nomachine.log" 2>&1 &&
    fail "device = 'cuda' planned without --machine in a build without CUDA"
grep -q "built without CUDA" "$TEST_DIR/nomachine.log" || fail "$(cat "$TEST_DIR/nomachine.log")"
./llmtrain --plan "$TEST_DIR/gpt.nml" --machine $M/h100-sxm5-80gb.nml >"$TEST_DIR/plan.log" 2>&1 ||
    { cat "$TEST_DIR/plan.log"; fail "--plan --machine exited non-zero"; }
grep -q "tokens/s" "$TEST_DIR/plan.log" || fail "no figures: $(cat "$TEST_DIR/plan.log")"
./llmtrain --plan "$TEST_DIR/gpt.nml" --machine $M/h100-sxm5-80gb.nml --json >"$TEST_DIR/one.json" ||
    fail "--json exited non-zero"
./llmtrain --plan "$TEST_DIR/gpt.nml" --machine $M/a100-sxm4-80gb.nml --search 16 --json \
    >"$TEST_DIR/search.json" || fail "--search 16 --json exited non-zero"
$PYTHON - "$TEST_DIR/one.json" "$TEST_DIR/search.json" <<'PY' || fail "JSON checks"
import json, sys
one, search = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["step_s", "tokens_per_s", "tflops_per_device", "mfu", "memory_gib_per_device", "fits",
        "dp", "tp", "pp", "virtual_stages", "micro_batch", "recompute", "zero_stage", "schedule",
        "sequence_parallel"]
missing = [k for k in keys if k not in one]
assert not missing, f"missing keys {missing}"
assert (one["dp"], one["tp"], one["pp"]) == (4, 2, 2), one
tok = 64 * 2048 / one["step_s"]
assert abs(one["tokens_per_s"] - tok) <= 1e-5 * tok, (one["tokens_per_s"], tok)
parts = sum(one["parts"].values())
assert abs(parts - one["step_s"]) <= 1e-5 * one["step_s"], (parts, one["step_s"])
assert 0 < one["mfu"] < 1, one["mfu"]
c = search["candidates"]
assert c, "no candidates"
steps = [x["step_s"] for x in c]
assert steps == sorted(steps), steps
for x in c:
    assert x["fits"] and x["dp"] * x["cp"] * x["tp"] * x["pp"] == 16, x
    assert x["sequence_parallel"] in (True, False) and (x["tp"] > 1 or not x["sequence_parallel"]), x
print("json ok:", one["step_s"], "s;", len(c), "candidates, best", c[0]["step_s"], "s")
PY
# GPT-3-sized: 96 layers of d_model 12288, 2048 tokens, global batch 1536
cat >"$TEST_DIR/gpt3.nml" <<NML
&run name = 'g3', out_dir = '$TEST_DIR' /
&model n_layer = 96, n_head = 96, d_model = 12288, vocab_size = 50257, seq_len = 2048 /
&parallel dp = 12, tp = 8, pp = 16 /
&train micro_batch = 1, global_batch = 1536, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
NML
timeout 300 ./llmtrain --plan "$TEST_DIR/gpt3.nml" --machine $M/a100-sxm4-80gb.nml --search 1536 --json \
    >"$TEST_DIR/gpt3.json" || fail "GPT-3 search exited non-zero"
$PYTHON - "$TEST_DIR/gpt3.json" <<'PY' || fail "the best GPT-3 grids split tp over nodes"
import json, sys
grids = []
for x in json.load(open(sys.argv[1]))["candidates"]:
    if (x["dp"], x["tp"], x["pp"]) not in grids:
        grids.append((x["dp"], x["tp"], x["pp"]))
print("GPT-3-sized on 1536 A100: the best grids (dp, tp, pp), fastest first:", grids)
assert grids[0][1] == 8, grids
assert all(tp <= 8 for _, tp, _ in grids), grids
PY
expect_refusal() { # name want command...
    local name=$1 want=$2; shift 2
    "$@" >"$TEST_DIR/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || { cat "$TEST_DIR/$name.log"; fail "$name: exit $rc, not 2"; }
    grep -q -- "$want" "$TEST_DIR/$name.log" || { cat "$TEST_DIR/$name.log"; fail "$name: no '$want'"; }
    [ "$(grep -c "error" "$TEST_DIR/$name.log")" -eq 1 ] || { cat "$TEST_DIR/$name.log"; fail "$name: not one message"; }
}
grep -v "memory_gib" $M/h100-sxm5-80gb.nml >"$TEST_DIR/missing.nml"
expect_refusal missing "missing key 'memory_gib'" ./llmtrain --plan "$TEST_DIR/gpt.nml" --machine "$TEST_DIR/missing.nml"
sed 's/peak_tflops_bf16 = 989/peak_tflops_bf16 = 0/' $M/h100-sxm5-80gb.nml >"$TEST_DIR/zero.nml"
expect_refusal zero "peak_tflops_bf16" ./llmtrain --plan "$TEST_DIR/gpt.nml" --machine "$TEST_DIR/zero.nml"
expect_refusal dividing "devices_per_node" ./llmtrain --plan "$TEST_DIR/gpt.nml" --machine $M/h100-sxm5-80gb.nml parallel.dp=3 train.global_batch=48
sed 's/memory_gib = 80/memory_gib = 2/' $M/h100-sxm5-80gb.nml >"$TEST_DIR/small.nml"
expect_refusal nofit "no configuration fits 2.00 GiB.*the smallest change: 16 devices" ./llmtrain --plan "$TEST_DIR/gpt.nml" --machine "$TEST_DIR/small.nml" --search 4
expect_refusal params "no configuration fits 80.00 GiB.*the smallest change: 64 devices" ./llmtrain --plan "$TEST_DIR/gpt3.nml" --machine $M/a100-sxm4-80gb.nml --search 8
./llmtrain --plan "$TEST_DIR/gpt3.nml" --machine $M/a100-sxm4-80gb.nml --search 64 --json >"$TEST_DIR/gpt3_64.json" ||
    fail "GPT-3 on 64 devices: --search exited non-zero"
$PYTHON - "$TEST_DIR/gpt3_64.json" <<'PY' || fail "GPT-3 on 64 devices: no candidate with more than 2^31 parameters per rank"
import json, sys
c = json.load(open(sys.argv[1]))["candidates"]
assert c and c[0]["fits"], c[:1]
big = [x for x in c if x["fits"] and 175e9 / (x["tp"] * x["pp"]) > 2 ** 31]
assert big, [(x["tp"], x["pp"]) for x in c]
print("GPT-3 on 64 A100: %d candidates, %d of them over 2^31 parameters per rank" % (len(c), len(big)))
PY
expect_refusal jsononly "need --machine" ./llmtrain --plan "$TEST_DIR/gpt.nml" --json
grep "smallest change" "$TEST_DIR/nofit.log"
# context parallelism: the namelist's own cp (device 'cpu': the ring's device; the machine file
# says what the devices are)
sed -e "s/device = 'cuda' //" -e "s/&parallel dp = 4, tp = 2, pp = 2/\&parallel dp = 2, cp = 2, tp = 2/" \
    "$TEST_DIR/gpt.nml" >"$TEST_DIR/cp.nml"
./llmtrain --plan "$TEST_DIR/cp.nml" --machine $M/a100-sxm4-80gb.nml >"$TEST_DIR/cp.log" 2>&1 ||
    { cat "$TEST_DIR/cp.log"; fail "--plan with cp 2 exited non-zero"; }
grep -q "dp 2 x cp 2 x tp 2 x pp 1" "$TEST_DIR/cp.log" && grep -Eq "^  cp +[0-9]" "$TEST_DIR/cp.log" &&
    grep -q "runs it on device 'cpu' only" "$TEST_DIR/cp.log" || fail "cp plan: $(cat "$TEST_DIR/cp.log")"
./llmtrain --plan "$TEST_DIR/cp.nml" --machine $M/a100-sxm4-80gb.nml --json >"$TEST_DIR/cp.json" ||
    fail "--plan with cp 2 --json exited non-zero"
expect_refusal cp3 "seq_len" ./llmtrain --plan "$TEST_DIR/cp.nml" --machine $M/a100-sxm4-80gb.nml parallel.cp=3 parallel.dp=1
cat >"$TEST_DIR/long.nml" <<NML
&run name = 'l', out_dir = '$TEST_DIR' /
&model n_layer = 32, n_head = 32, d_model = 4096, vocab_size = 32000, seq_len = 262144 /
&parallel tp = 8 /
&train micro_batch = 1, global_batch = 8, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
NML
./llmtrain --plan "$TEST_DIR/long.nml" --machine $M/a100-sxm4-80gb.nml --search 16 --json >"$TEST_DIR/long.json" ||
    fail "long-sequence --search 16 --json exited non-zero"
./llmtrain --plan "$TEST_DIR/long.nml" --machine $M/a100-sxm4-80gb.nml --search 16 >"$TEST_DIR/long.log" ||
    fail "long-sequence --search 16 exited non-zero"
grep -Eq "^ +# +dp +cp +tp" "$TEST_DIR/long.log" && grep -Eq "^#1: dp [0-9]+ x cp ([2-9]|[1-9][0-9]+) x tp" "$TEST_DIR/long.log" ||
    fail "long-sequence search text: $(head -12 "$TEST_DIR/long.log")"
$PYTHON - "$TEST_DIR/cp.json" "$TEST_DIR/long.json" <<'PY' || fail "cp JSON checks"
import json, sys
one, search = (json.load(open(p)) for p in sys.argv[1:3])
assert (one["dp"], one["cp"], one["tp"], one["pp"]) == (2, 2, 2, 1), one
assert one["parts"]["cp"] > 0, one["parts"]
parts = sum(one["parts"].values())
assert abs(parts - one["step_s"]) <= 1e-5 * one["step_s"], (parts, one["step_s"])
tok = 64 * 2048 / one["step_s"]
assert abs(one["tokens_per_s"] - tok) <= 1e-5 * tok, (one["tokens_per_s"], tok)
c = search["candidates"]
assert c and c[0]["cp"] > 1, c[:1]
for x in c:
    assert x["fits"] and x["dp"] * x["cp"] * x["tp"] * x["pp"] == 16, x
print("cp ok: dp 2 x cp 2 x tp 2", one["step_s"], "s, cp part", one["parts"]["cp"], "s; seq_len 262144 on 16:",
      [(x["dp"], x["cp"], x["tp"], x["pp"]) for x in c])
PY
echo "perf_plan: ok"
