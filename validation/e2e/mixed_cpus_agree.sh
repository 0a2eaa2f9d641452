#!/usr/bin/env bash
# A job whose nodes have different CPUs chooses alike on every rank. Rank 0 is made to answer as a
# CPU without native bf16 products would (the test hook LLMT_CPU_NO_BF16=1, set for rank 0 alone
# through mpirun's MPMD syntax), rank 1 has them (this machine's oneDNN: skipped where it has
# none). With precision = 'bf16', bf16_products = 'native' and weights_storage = 'auto', each rank
# once chose by its own CPU: rank 1 bf16 products and a 16-bit weights copy, rank 0 fp32 ones,
# and ZeRO-3's gathers then exchanged elements of different sizes. Now what any rank lacks counts
# as missing on all: both emulate, with fp32 weights arrays. Reference: the same run with the hook
# on both ranks; step records and final weights bit-identical; the startup says the CPUs differ.
source "$(dirname "$0")/lib.bash"
grep -qw avx512_bf16 /proc/cpuinfo || grep -qw amx_bf16 /proc/cpuinfo ||
    { echo "SKIP: this CPU has no native bf16 products, so no rank can differ from the hooked one"; exit 77; }
write_tiny_nml "$TEST_DIR/m.nml" max_steps=4 mb=2 gb=8 val_every=2 \
    "extra_train=precision = 'bf16', bf16_products = 'native', weights_storage = 'auto'"
O=(parallel.dp=2 parallel.zero_stage=3 checkpoint.timeout_s=60)
run() { # name: the MPMD line after it
    local name=$1; shift
    local rc=0
    timeout 300 mpirun --oversubscribe "$@" </dev/null >"$TEST_DIR/$name.log" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { tail -15 "$TEST_DIR/$name.log"; fail "$name: exit $rc"; }
}
L="./llmtrain $TEST_DIR/m.nml ${O[*]}"
run both_no  -np 1 -x LLMT_CPU_NO_BF16=1 $L run.name=both_no : -np 1 -x LLMT_CPU_NO_BF16=1 $L run.name=both_no
run mixed    -np 1 -x LLMT_CPU_NO_BF16=1 $L run.name=mixed : -np 1 $L run.name=mixed
grep -q "^products: the ranks' CPUs differ (native bf16 products on some ranks only)" "$TEST_DIR/mixed.log" ||
    fail "mixed: the startup does not say the CPUs differ"
grep -q "^weights copy: fp32" "$TEST_DIR/mixed.log" || grep -q "^weights copy: .*fp32 arrays" "$TEST_DIR/mixed.log" ||
    { grep "^weights copy" "$TEST_DIR/mixed.log"; fail "mixed: the weights copy is not fp32 arrays"; }
a=$(train_records "$TEST_DIR/both_no/metrics.jsonl") b=$(train_records "$TEST_DIR/mixed/metrics.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "mixed: step records differ from the all-emulating run"; }
same_weights "$TEST_DIR/both_no/weights_step000004.h5" "$TEST_DIR/mixed/weights_step000004.h5" ||
    fail "mixed: final weights differ from the all-emulating run"
echo "mixed_cpus_agree: $(grep '^products:' "$TEST_DIR/mixed.log")"
echo "mixed_cpus_agree: step records and final weights bit-identical to the run where no rank has native bf16"
