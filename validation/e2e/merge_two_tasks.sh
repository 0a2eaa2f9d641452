#!/usr/bin/env bash
# A merged model evaluates: a base trained on one synthetic language (data/tiny) is fine-tuned
# into A on a second and into B on a third (make_synthetic_shards.py --seed 2 / 3); the linear
# merge 0.5 A + 0.5 B, evaluated with llmtrain mode = 'eval' on the validation shards of both
# tasks (the mean of the two losses), has a loss between its parents' or below them. The use cases of a training run on the
# same models: the average of the last 2 checkpoints of A's run (models = 'ckpt_step*.h5',
# last = 2) and a slerp of two stages of a multi-stage run (the base and A) load and evaluate
# too; every loss is printed.
source "$(dirname "$0")/lib.bash"
[ -x ./llmmerge ] || fail "./llmmerge is not built (make)"
for s in 2 3; do
    $PYTHON validation/make_synthetic_shards.py $TEST_DIR/task$s --seed $s >/dev/null || fail "making task $s failed"
done
train() { # name steps train_files [init_from]
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=$2 val_every=0 warmup=2 "train_files=$3" init_from=${4:-}
    printf '&checkpoint\n  every = 20\n/\n' >>$TEST_DIR/$1.nml
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "training $1 failed"; }
}
train base 60 'data/tiny/train_*.bin'
train fta 60 "$TEST_DIR/task2/train_*.bin" $TEST_DIR/base/weights_step000060.h5
train ftb 60 "$TEST_DIR/task3/train_*.bin" $TEST_DIR/base/weights_step000060.h5
merge() { # name 'namelist body'
    printf '&merge\n%b\n  out = %s\n/\n' "$2" "'$TEST_DIR/$1.h5'" >$TEST_DIR/$1.merge.nml
    $MPIRUN -np 2 ./llmmerge $TEST_DIR/$1.merge.nml >$TEST_DIR/$1.merge.log 2>&1 || { cat $TEST_DIR/$1.merge.log; fail "merge $1 failed"; }
}
merge linear "  method = 'linear'\n  models = '$TEST_DIR/fta/weights_step000060.h5', '$TEST_DIR/ftb/weights_step000060.h5'\n  weights = 0.5, 0.5"
merge last2 "  method = 'linear'\n  models = '$TEST_DIR/fta/ckpt_step*.h5'\n  last = 2"
merge stages "  method = 'slerp'\n  base = '$TEST_DIR/base/weights_step000060.h5'\n  models = '$TEST_DIR/fta/weights_step000060.h5'\n  t = 0.5"
grep -q "ckpt_step00000040.h5', '.*ckpt_step00000060.h5'" <(h5dump -a merge_parameters $TEST_DIR/last2.h5) ||
    fail "last = 2 did not take the last two checkpoints"
evaluate() { # weights val_files -> the val loss
    local n=$((${EVALS:-0} + 1)); EVALS=$n
    write_tiny_nml $TEST_DIR/eval$n.nml name=eval$n mode=eval init_from=$1 "val_files=$2"
    sed -i 's/val_batches = 4/val_batches = 32/' $TEST_DIR/eval$n.nml
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/eval$n.nml >$TEST_DIR/eval$n.log 2>&1 || { tail $TEST_DIR/eval$n.log; fail "eval of $1 failed"; }
    grep '^eval: val_loss' $TEST_DIR/eval$n.log | awk '{print $3}'
}
t2="$TEST_DIR/task2/val_*.bin" t3="$TEST_DIR/task3/val_*.bin"
printf '%-26s %10s %10s %10s\n' model task2 task3 mean
for m in base/weights_step000060 fta/weights_step000060 ftb/weights_step000060 linear last2 stages; do
    EVALS=0
    l2=$(evaluate $TEST_DIR/$m.h5 "$t2"); l3=$(evaluate $TEST_DIR/$m.h5 "$t3")
    lb=$(awk -v a="$l2" -v b="$l3" 'BEGIN {printf "%.6f", (a + b) / 2}')
    printf '%-26s %10s %10s %10s\n' "$m" "$l2" "$l3" "$lb"
    eval "loss_${m%%/*}=$lb"
done
awk -v m="$loss_linear" -v a="$loss_fta" -v b="$loss_ftb" 'BEGIN {hi = a > b ? a : b; exit !(m <= hi)}' ||
    fail "the linear merge's loss on both tasks ($loss_linear) is above both parents' ($loss_fta, $loss_ftb)"
echo "linear merge of the two fine-tunes: $loss_linear on both tasks, parents $loss_fta and $loss_ftb"
