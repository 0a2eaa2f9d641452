#!/usr/bin/env bash
# Dropout (attention probabilities, residual branches, embeddings: &model dropout = 0.1), label
# smoothing 0.1 and z-loss 1e-3 are grid-invariant: a 4-layer model (4 heads) trains 4 steps on
# 7 grids of 2 and 4 ranks (8 micro-batches per rank, 4 at dp 2; 1F1B where pp > 1), and its
# losses, z-losses and gradient norms agree with the 1-process run to 1e-5 relative (and 2
# OpenMP threads give the 1-thread run's bits: the masks do not depend on the threads). Activation
# recomputation redraws the same masks: recompute = 'selective' and 'full' give BIT-IDENTICAL
# losses, norms and final weights to 'none' (cmp; h5diff without tolerance) on tp 2 x pp 2.
# The masks depend on the step only, so the serial run's step-2 checkpoint resumed on tp 2 x pp 2
# continues with the uninterrupted run's losses (1e-5). The Llama block (GQA, SwiGLU, RoPE) on tp 2
# and the interleaved schedule (pp 2, v 2) agree with their 1-process runs alike (1e-5), and so
# does a curriculum whose first stage has a shorter seq_len and a smaller batch (dp 2 x pp 2).
# And the regularisers act in training only: with lr = 1e-30 (the weights do not move in fp32)
# the step-1 training loss differs from the run without them, while the validation loss after
# step 1 (forward only: no dropout, smoothing or z-loss) is the same to the last digit.
source "$(dirname "$0")/lib.bash"
reg_nml() { # name dp,tp,pp recompute dropout smoothing z_loss
    IFS=, read -r dp tp pp <<<"$2"
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 11 /
&model n_layer = 4, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = 16,
       dropout = $4 /
&parallel dp = $dp, tp = $tp, pp = $pp, recompute = '$3' /
&train max_steps = 4, micro_batch = 1, global_batch = 8, lr = 3e-3, warmup_steps = 2,
       label_smoothing = $5, z_loss = $6 /
&data train_files = 'data/tiny/train_*.bin', val_files = 'data/tiny/val_*.bin', val_every = 100,
      val_batches = 2 /
&log every = 4 /
NML
}
run() { # name np
    timeout 120 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$1.log"; fail "$1 exited non-zero"; }
}
zlosses() { grep -o '"z_loss":[^,}]*' "$1" | cut -d: -f2; }
first_val() { grep -o '"val_loss":[^,}]*' "$1" | head -1 | cut -d: -f2; }
M=$TEST_DIR
reg_nml serial 1,1,1 none 0.1 0.1 1e-3
echo "&checkpoint every = 2 /" >>$M/serial.nml
run serial 1
[ "$(zlosses $M/serial/metrics.jsonl | wc -l)" = 4 ] || fail "serial: no z_loss in the step records"
reg_nml threads2 1,1,1 none 0.1 0.1 1e-3
OMP_NUM_THREADS=2 run threads2 1
cmp -s <(losses $M/serial/metrics.jsonl) <(losses $M/threads2/metrics.jsonl) &&
    cmp -s <(norms $M/serial/metrics.jsonl) <(norms $M/threads2/metrics.jsonl) ||
    fail "2 OpenMP threads: losses or norms not bit-identical to 1 thread"
echo "2 OpenMP threads: losses and norms bit-identical to 1 thread"
for g in 2,1,1 1,2,1 1,1,2 2,2,1 1,2,2 1,4,1 1,1,4; do
    IFS=, read -r dp tp pp <<<"$g"
    name=dp${dp}tp${tp}pp${pp}
    reg_nml $name $g none 0.1 0.1 1e-3
    run $name $((dp * tp * pp))
    out=$(same_series "$name losses" 1e-5 <(losses $M/serial/metrics.jsonl) <(losses $M/$name/metrics.jsonl)) ||
        { echo "$out"; fail "$name: losses differ from the serial run"; }
    out2=$(same_series "z_loss" 1e-5 <(zlosses $M/serial/metrics.jsonl) <(zlosses $M/$name/metrics.jsonl)) ||
        { echo "$out2"; fail "$name: z-losses differ from the serial run"; }
    out3=$(same_series "norms" 1e-5 <(norms $M/serial/metrics.jsonl) <(norms $M/$name/metrics.jsonl)) ||
        { echo "$out3"; fail "$name: gradient norms differ from the serial run"; }
    echo "$out | $out2 | $out3"
done
for g in 1,2,2; do
    IFS=, read -r dp tp pp <<<"$g"
    np=$((dp * tp * pp)) ref=rc${dp}${tp}${pp}_none
    reg_nml $ref $g none 0.1 0.1 1e-3
    run $ref $np
    for rc in selective full; do
        name=rc${dp}${tp}${pp}_$rc
        reg_nml $name $g $rc 0.1 0.1 1e-3
        run $name $np
        cmp -s <(losses $M/$ref/metrics.jsonl) <(losses $M/$name/metrics.jsonl) ||
            fail "$name: losses not bit-identical to recompute = 'none'"
        cmp -s <(norms $M/$ref/metrics.jsonl) <(norms $M/$name/metrics.jsonl) ||
            fail "$name: gradient norms not bit-identical to recompute = 'none'"
        h5diff $M/$ref/weights_step000004.h5 $M/$name/weights_step000004.h5 /model /model >$M/$name.diff ||
            { head $M/$name.diff; fail "$name: final weights not bit-identical to recompute = 'none'"; }
        echo "grid $g, recompute = '$rc' with dropout: losses, norms and final weights bit-identical to 'none'"
    done
done
# The Llama block (RMSNorm, RoPE, SwiGLU, grouped-query attention with 2 k/v heads, untied head)
# with the same regularisers: tp 2 (query and k/v heads split) against its own 1-process run.
# And the interleaved schedule (pp 2, 2 chunks per stage) against the serial GPT-2 run.
for v in llama,1,1,1 llama,1,2,1; do
    IFS=, read -r name dp tp pp <<<"$v"
    name=${name}tp$tp
    reg_nml $name $dp,$tp,$pp none 0.1 0.1 1e-3
    sed -i "s|dropout = 0.1 /|dropout = 0.1, arch = 'llama', n_kv_head = 2 /|" $M/$name.nml
    run $name $((dp * tp * pp))
done
out=$(same_series "llama tp 2 losses" 1e-5 <(losses $M/llamatp1/metrics.jsonl) <(losses $M/llamatp2/metrics.jsonl)) &&
    out2=$(same_series "norms" 1e-5 <(norms $M/llamatp1/metrics.jsonl) <(norms $M/llamatp2/metrics.jsonl)) ||
    { echo "$out ${out2:-}"; fail "llama tp 2 with dropout: losses or norms differ from its serial run"; }
echo "$out | $out2"
cmp -s <(losses $M/serial/metrics.jsonl) <(losses $M/llamatp1/metrics.jsonl) &&
    fail "the llama run's losses equal the GPT-2 run's: the architecture switch did not apply"
reg_nml interleaved 1,1,2 none 0.1 0.1 1e-3
sed -i "s|recompute = 'none' /|recompute = 'none', schedule = 'interleaved', virtual_stages = 2 /|" $M/interleaved.nml
run interleaved 2
grep -q "interleaved" $M/interleaved.log || grep -q "interleaved" $M/interleaved/run.json ||
    fail "interleaved: the run does not say it used the interleaved schedule"
out=$(same_series "pp 2 interleaved (v 2) losses" 1e-5 <(losses $M/serial/metrics.jsonl) <(losses $M/interleaved/metrics.jsonl)) &&
    out2=$(same_series "norms" 1e-5 <(norms $M/serial/metrics.jsonl) <(norms $M/interleaved/metrics.jsonl)) ||
    { echo "$out ${out2:-}"; fail "interleaved with dropout: losses or norms differ from the serial run"; }
echo "$out | $out2"
# A curriculum (&stage: seq_len 8 and global batch 4 for steps 1-2, then 16 and 8): the global
# token is the sample's index in the step's batch times the step's seq_len, the same on dp 2 x pp 2.
for g in 1,1,1 2,1,2; do
    name=curric${g//,/}
    reg_nml $name $g none 0.1 0.1 1e-3
    printf '&stage\n  until_step = 2, seq_len = 8, global_batch = 4\n/\n&stage\n/\n' >>$M/$name.nml
    IFS=, read -r dp tp pp <<<"$g"
    run $name $((dp * tp * pp))
done
grep -q '"seq_len":8' $M/curric111/metrics.jsonl || fail "curriculum: no step ran at seq_len 8"
out=$(same_series "curriculum (seq_len 8 -> 16) dp 2 x pp 2 losses" 1e-5 <(losses $M/curric111/metrics.jsonl) <(losses $M/curric212/metrics.jsonl)) &&
    out2=$(same_series "norms" 1e-5 <(norms $M/curric111/metrics.jsonl) <(norms $M/curric212/metrics.jsonl)) ||
    { echo "$out ${out2:-}"; fail "curriculum with dropout: losses or norms differ from the serial run"; }
echo "$out | $out2"
reg_nml resumed 1,2,2 none 0.1 0.1 1e-3
echo "&checkpoint resume = '$M/serial/ckpt_step00000002.h5' /" >>$M/resumed.nml
run resumed 4
out=$(same_series "resumed at step 2 on tp 2 x pp 2: losses of steps 3-4" 1e-5 \
      <(losses $M/serial/metrics.jsonl | tail -2) <(losses $M/resumed/metrics.jsonl)) ||
    { echo "$out"; fail "the resumed run's losses differ from the uninterrupted run"; }
echo "$out"
reg_nml plain 1,1,1 none 0 0 0
reg_nml regular 1,1,1 none 0.1 0.1 1e-3
sed -i 's/val_every = 100/val_every = 1/; s/lr = 3e-3/lr = 1e-30/' $M/plain.nml $M/regular.nml
run plain 1
run regular 1
a=$(losses $M/regular/metrics.jsonl | head -1) b=$(losses $M/plain/metrics.jsonl | head -1)
[ "$a" != "$b" ] || fail "the step-1 loss with dropout, smoothing and z-loss equals the plain one ($a)"
va=$(first_val $M/regular/metrics.jsonl) vb=$(first_val $M/plain/metrics.jsonl)
[ -n "$va" ] && [ "$va" = "$vb" ] || fail "validation loss with regularisers $va, without $vb: validation must not use them"
echo "step-1 loss: regularised $a, plain $b; first validation loss equal in both: $va"
