#!/usr/bin/env bash
# Sparse inference: a tiny MoE model (4 experts, top-2, capacity_factor 1.25, 1 shared expert)
# trained 20 steps writes its weights; from them
#   mode = 'eval' reproduces the training run's last validation loss (rel. 1e-6; both are
#     non-training passes over the same batches at the same weights);
#   mode = 'generate' prints 12 new ids inside the vocabulary, the same in a second run, greedy
#     (temperature 0) and sampled (temperature 0.8, top_k 20, one seed);
#   generation on 2 ranks with the experts split over them (dp = 2, ep = 2) prints the serial
#     greedy continuation (the expert exchange in a non-training forward; the routing of a
#     forward does not depend on ep).
#   generation is dropless whatever capacity_factor says (a forward there is the N tokens of one
#     window, and a capacity of ceil(N k cf / E) would drop some): greedy and sampled output
#     with capacity_factor = 1.25 equal capacity_factor = 0's (with capacity they differed
#     from the first token: 98 vs 110).
source "$(dirname "$0")/lib.bash"
MOE="n_experts = 4, top_k = 2, capacity_factor = 1.25, d_ff_expert = 64, n_shared_experts = 1"

# moe_nml PATH MODEL_KEYS [write_tiny_nml key=value ...]: MODEL_KEYS added to &model
moe_nml() {
    local path=$1 keys=$2; shift 2
    write_tiny_nml "$path" "$@"
    sed -i "s/seq_len = 32/seq_len = 32, $keys/" "$path"
}

moe_nml $TEST_DIR/train.nml "$MOE" name=train max_steps=20 warmup=2 val_every=20
$MPIRUN -np 1 ./llmtrain $TEST_DIR/train.nml >$TEST_DIR/train.log 2>&1 || { tail $TEST_DIR/train.log; fail "training failed"; }
w=$TEST_DIR/train/weights_step000020.h5
[ -f $w ] || fail "no final weights $w"
grep -q '"moe0_load"' $TEST_DIR/train/metrics.jsonl || fail "the run has no MoE metrics: not an MoE model"
want=$(grep '"val_loss"' $TEST_DIR/train/metrics.jsonl | tail -1 | sed 's/.*"val_loss":\([^,}]*\).*/\1/')

moe_nml $TEST_DIR/eval.nml "$MOE" name=eval mode=eval init_from=$w
$MPIRUN -np 1 ./llmtrain $TEST_DIR/eval.nml >$TEST_DIR/eval.log 2>&1 || { tail $TEST_DIR/eval.log; fail "eval failed"; }
got=$(grep '^eval: val_loss' $TEST_DIR/eval.log | awk '{print $3}')
echo "val_loss at the end of training $want, eval mode $got"
[ -n "$want" ] && [ -n "$got" ] || fail "no val_loss to compare (training '$want', eval '$got')"
awk -v a="$want" -v b="$got" 'BEGIN {e = (a - b) / a; if (e < 0) e = -e; exit !(e < 1e-6)}' || fail "eval loss differs"

gfail() { echo "FAIL: $*" >&2; exit 1; } # inside $(gen ...): the message must not be captured
# gen NAME TEMPERATURE TOP_K NP [MODEL_KEYS [DP EP]]: the continuation line of a generate run
gen() {
    local keys=${5:-$MOE} dp=${6:-1}
    moe_nml $TEST_DIR/$1.nml "$keys" name=$1 mode=generate init_from=$w dp=$dp \
        extra_run="prompt_ids = 10, 20, 30, max_new_tokens = 12, temperature = $2, top_k = $3"
    [ -n "${7:-}" ] && sed -i "s/^  dp = $dp/  dp = $dp, ep = $7/" $TEST_DIR/$1.nml
    timeout 60 $MPIRUN -np $4 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 ||
        { tail $TEST_DIR/$1.log >&2; gfail "generate $1 failed"; }
    grep '^generate: continuation' $TEST_DIR/$1.log || gfail "generate $1 printed no continuation"
}
g1=$(gen greedy1 0 0 1) || exit 1
g2=$(gen greedy2 0 0 1) || exit 1
s1=$(gen sample1 0.8 20 1) || exit 1
s2=$(gen sample2 0.8 20 1) || exit 1
echo "greedy:  $g1"; echo "sampled: $s1"
[ "$g1" = "$g2" ] || fail "greedy generation not reproducible: '$g2'"
[ "$s1" = "$s2" ] || fail "sampled generation not reproducible for one seed: '$s2'"
for g in "$g1" "$s1"; do
    n=$(echo "$g" | awk '{print NF - 2}')
    [ "$n" -eq 12 ] || fail "expected 12 new tokens, got $n: $g"
    echo "$g" | tr ' ' '\n' | grep -E '^[0-9]+$' | awk '$1 >= 500 {exit 1}' || fail "token id outside the vocabulary: $g"
done

DROPLESS=${MOE/capacity_factor = 1.25/capacity_factor = 0}
d1=$(gen dropless_greedy 0 0 1 "$DROPLESS") || exit 1
d2=$(gen dropless_sampled 0.8 20 1 "$DROPLESS") || exit 1
[ "$d1" = "$g1" ] && [ "$d2" = "$s1" ] ||
    fail "generation depends on capacity_factor (it must be dropless): greedy $d1 vs $g1, sampled $d2 vs $s1"
echo "capacity_factor 1.25 and 0 generate the same, greedy and sampled: generation is dropless"
e1=$(gen greedy_ep2 0 0 2 "$MOE" 2 2) || exit 1
echo "greedy, dp 2 ep 2: $e1"
[ "$e1" = "$g1" ] || fail "generation with the experts split over 2 ranks differs from serial: '$e1' vs '$g1'"

echo "PASS"
