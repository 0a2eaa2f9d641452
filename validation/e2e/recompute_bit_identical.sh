#!/usr/bin/env bash
# Activation recomputation changes memory, not numbers: on a 4-layer model, &parallel recompute =
# 'selective' (all blocks, and recompute_layers = 2) and 'full' (all, and recompute_layers = 1)
# give BIT-IDENTICAL results to recompute = 'none' (cmp; h5diff without tolerance): losses and
# gradient norms of 10 steps, validation losses (forward only) at steps 5 and 10, the gradients
# of step 3 and the final weights, on 1 rank, tp = 2, pp = 2 (1F1B, 4 micro-batches) and dp 2 x
# tp 2 x pp 2. And the activations of one slot (startup memory plan) shrink: none > selective
# (2 layers) >= selective > full and none > full (1 layer) > full.
# A recomputation that differed from the forward in any bit (another kernel, other inputs, a
# stale or clobbered scratch buffer, a missing tp all-reduce) would show in the gradients.
source "$(dirname "$0")/lib.bash"
rc_nml() { # name grid(dp,tp,pp) recompute recompute_layers
    IFS=, read -r dp tp pp <<<"$2"
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model n_layer = 4, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 64 /
&parallel dp = $dp, tp = $tp, pp = $pp, schedule = '1f1b', recompute = '$3', recompute_layers = $4 /
&train max_steps = 10, micro_batch = 2, global_batch = $((8 * dp)), lr = 3e-3, warmup_steps = 2,
       dump_grads_step = 3 /
&data train_files = 'data/tiny/train_*.bin', val_files = 'data/tiny/val_*.bin', val_every = 5, val_batches = 2 /
&log every = 10 /
NML
}
slot_mib() { sed -n 's/.*activations (rank 0): [0-9]* slots\{0,1\} x \([0-9.]*\) MiB.*/\1/p' "$TEST_DIR/$1.log"; }
for grid in 1,1,1 1,2,1 1,1,2 2,2,2; do
    IFS=, read -r dp tp pp <<<"$grid"
    np=$((dp * tp * pp)) g=dp${dp}tp${tp}pp${pp}
    for v in none:-1 selective:-1 selective:2 full:-1 full:1; do
        name=${g}_${v%%:*}${v#*:}
        rc_nml "$name" "$grid" "${v%%:*}" "${v#*:}"
        timeout 300 $MPIRUN -np $np ./llmtrain "$TEST_DIR/$name.nml" >"$TEST_DIR/$name.log" 2>&1 ||
            { tail -20 "$TEST_DIR/$name.log"; fail "$name exited non-zero"; }
    done
    ref=${g}_none-1
    line="$g: slot MiB none $(slot_mib $ref)"
    for v in selective-1 selective2 full-1 full1; do
        name=${g}_$v
        cmp -s <(losses "$TEST_DIR/$ref/metrics.jsonl") <(losses "$TEST_DIR/$name/metrics.jsonl") ||
            { paste <(losses "$TEST_DIR/$ref/metrics.jsonl") <(losses "$TEST_DIR/$name/metrics.jsonl");
              fail "$name: losses are not bit-identical to recompute = 'none'"; }
        cmp -s <(norms "$TEST_DIR/$ref/metrics.jsonl") <(norms "$TEST_DIR/$name/metrics.jsonl") ||
            { paste <(norms "$TEST_DIR/$ref/metrics.jsonl") <(norms "$TEST_DIR/$name/metrics.jsonl");
              fail "$name: gradient norms are not bit-identical to recompute = 'none'"; }
        cmp -s <(grep -o '"val_loss":[^,}]*' "$TEST_DIR/$ref/metrics.jsonl") \
            <(grep -o '"val_loss":[^,}]*' "$TEST_DIR/$name/metrics.jsonl") ||
            fail "$name: validation losses (forward only) are not bit-identical to recompute = 'none'"
        h5diff "$TEST_DIR/$ref/grads_step000003.h5" "$TEST_DIR/$name/grads_step000003.h5" /model /model \
            >"$TEST_DIR/$name.diff" ||
            { head -20 "$TEST_DIR/$name.diff"; fail "$name: step-3 gradients are not bit-identical"; }
        h5diff "$TEST_DIR/$ref/weights_step000010.h5" "$TEST_DIR/$name/weights_step000010.h5" /model /model \
            >"$TEST_DIR/$name.diff" || { head -20 "$TEST_DIR/$name.diff"; fail "$name: final weights differ"; }
        line="$line, $v $(slot_mib $name)"
    done
    [ "$(grep -c val_loss "$TEST_DIR/$ref/metrics.jsonl")" = 2 ] || fail "$ref: no validation losses"
    echo "$line: losses, norms, val losses, gradients and weights bit-identical"
    awk -v a="$(slot_mib $ref)" -v s="$(slot_mib ${g}_selective-1)" -v s2="$(slot_mib ${g}_selective2)" \
        -v f="$(slot_mib ${g}_full-1)" -v f1="$(slot_mib ${g}_full1)" \
        'BEGIN {exit !(a > s && a >= s2 && s2 >= s && a > f1 && f1 > f && s > f)}' ||
        fail "$g: activation memory per slot is not none > selective and full(1 layer) > full"
    for v in none-1 full-1; do
        [ "$np" -gt 1 ] && grep -A$((np + 1)) "time split per step" "$TEST_DIR/${g}_$v.log" | tail -$np |
            awk -v h="$g: act. peak MiB per rank (${v%-1}):" '{printf "%s %s", NR == 1 ? h : "", $NF} END {print ""}'
    done
done
exit 0
