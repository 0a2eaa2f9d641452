#!/usr/bin/env bash
# A merge-weight search (llmsweep + src/tools/merge_trial.py) beats both parents and the 0.5/0.5
# merge, and its objective is what llmmerge + llmtrain mode = 'eval' give when run by hand.
# Setup as merge_two_tasks.sh: a base (60 steps on data/tiny) fine-tuned into A (60 steps on the
# task of make_synthetic_shards.py --seed 2) and B (50 steps, --seed 3: less trained, so the best
# merge leans towards A and the midpoint is not the optimum). The trial namelist is
# inputs/merge-search.nml with these paths; the study: merge_trial.t = uniform(0, 1) (weights
# 1 - t, t), bayes with 3 random start-up trials, 8 trials, objective val_loss = the mean of the
# two tasks' validation losses (32 batches each).
#  1. The study ends (exit 0) with 8 completed trials; each record's val_loss is the mean of its
#     val_loss_task_a and val_loss_task_b.
#  2. best.nml holds the best trial's t.
#  3. Independently (llmmerge with weights = 1 - t, t from best.nml, then llmtrain mode = 'eval' on
#     each task, the mean taken here): the same objective to 1e-6.
#  4. The best objective is <= both parents' (their own weight files, evaluated here) and <= the
#     0.5/0.5 merge's: the search found a merge at least as good as the midpoint. Failable: the
#     landscape (measured: 5.3905 at t = 0, minimum about 5.371 near t = 0.3, 5.3900 at 0.5, 5.534
#     at 1) leaves t in about [0.03, 0.5) to beat the midpoint.
#  5. Failures are one line 'merge_trial: error: ...', exit 2 and no record: an unknown
#     &merge_trial key (file:line:col, did you mean), a model file that does not exist (llmmerge's
#     message), a model shape that does not match (llmtrain's); the unknown key stops llmsweep's
#     preflight (exit 2) with the same message.
source "$(dirname "$0")/lib.bash"
[ -x ./llmmerge ] && [ -x ./llmtrain ] || fail "./llmmerge or ./llmtrain is not built (make)"
[ -x ./llmsweep ] || make -s llmsweep >/dev/null || fail "make llmsweep failed"
T0=$(date +%s)
for s in 2 3; do
    $PYTHON validation/make_synthetic_shards.py $TEST_DIR/task$s --seed $s >/dev/null || fail "making task $s failed"
done
train() { # name steps train_files [init_from]
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=$2 val_every=0 warmup=2 "train_files=$3" init_from=${4:-}
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "training $1 failed"; }
}
train base 60 'data/tiny/train_*.bin'
train fta 60 "$TEST_DIR/task2/train_*.bin" $TEST_DIR/base/weights_step000060.h5
train ftb 50 "$TEST_DIR/task3/train_*.bin" $TEST_DIR/base/weights_step000060.h5
A=$TEST_DIR/fta/weights_step000060.h5 B=$TEST_DIR/ftb/weights_step000050.h5
sed -e "s|runs/task_a/weights_step000060.h5|$A|; s|runs/task_b/weights_step000060.h5|$B|" \
    -e "s|data/task_a/|$TEST_DIR/task2/|; s|data/task_b/|$TEST_DIR/task3/|; s|out_dir = 'runs'|out_dir = '$TEST_DIR'|" \
    inputs/merge-search.nml >$TEST_DIR/trial.nml
grep -q "$B" $TEST_DIR/trial.nml || fail "inputs/merge-search.nml: the model paths were not found to replace"

echo "== 1. the study"
cat >$TEST_DIR/study.nml <<NML
&sweep
  name = 'merge', out_dir = '$TEST_DIR/studies', base = '$TEST_DIR/trial.nml'
  strategy = 'bayes', n_startup = 3, seed = 1, max_trials = 8, objective = 'val_loss'
  launcher = 'none', command = 'src/tools/merge_trial.py --launcher "$MPIRUN -np {ranks}" --ranks {ranks} {nml}'
/
&space
  merge_trial.t = uniform(0, 1)
/
NML
S=$TEST_DIR/studies/merge
./llmsweep $TEST_DIR/study.nml >$TEST_DIR/sweep.log 2>&1
rc=$?
[ $rc -eq 0 ] || { tail -20 $TEST_DIR/sweep.log; fail "llmsweep exited $rc"; }
$PYTHON - "$S" $TEST_DIR/best.txt <<'PY' || fail "the study's trials or records are not as expected"
import json, sys
S = sys.argv[1]
T = json.load(open(S + "/study.json"))["trials"]
ok = len(T) == 8 and all(t["status"] == "completed" for t in T)
print("trial   t       task_a    task_b    val_loss")
for t in sorted(T, key=lambda t: t["params"]["merge_trial.t"]):
    r = json.loads(open("%s/trials/%s/metrics.jsonl" % (S, t["name"])).read())
    mean = (r["val_loss_task_a"] + r["val_loss_task_b"]) / 2
    print("%s  %.4f  %.6f  %.6f  %.6f" % (t["name"], t["params"]["merge_trial.t"], r["val_loss_task_a"],
                                          r["val_loss_task_b"], t["objective"]))
    ok &= r["val_loss"] == mean == t["objective"] and r["weights"] == [1 - r["t"], r["t"]]
best = min(T, key=lambda t: t["objective"])
open(sys.argv[2], "w").write("%r %r %s\n" % (best["params"]["merge_trial.t"], best["objective"], best["name"]))
sys.exit(not ok)
PY
read -r t_best obj_best best_name <$TEST_DIR/best.txt
echo "8 trials completed; best $best_name: t = $t_best, val_loss $obj_best"

echo "== 2. best.nml holds the best t"
t_file=$($PYTHON -c "import sys; sys.path.insert(0, 'src/tools'); sys.dont_write_bytecode = True; import nml as n
print(repr(n.namelist_value(n.read_namelist_file('$S/best.nml'), 'merge_trial', 't')))")
[ "$t_file" = "$t_best" ] || fail "best.nml: merge_trial t = $t_file, the best trial's $t_best"
echo "best.nml: merge_trial t = $t_file"

echo "== 3. the objective recomputed by hand, and the parents and the midpoint"
merge() { # name weights: writes $TEST_DIR/name.h5
    printf "&merge\n  method = 'linear', models = '%s', '%s'\n  weights = %s\n  out = '%s'\n/\n" \
        "$A" "$B" "$2" "$TEST_DIR/$1.h5" >$TEST_DIR/$1.merge.nml
    $MPIRUN -np 1 ./llmmerge $TEST_DIR/$1.merge.nml >$TEST_DIR/$1.merge.log 2>&1 || { cat $TEST_DIR/$1.merge.log; fail "merge $1 failed"; }
}
evaluate() { # name weights_file -> the mean of the two tasks' val losses (a subshell: its caller checks)
    local s l sum=0
    for s in 2 3; do
        write_tiny_nml $TEST_DIR/eval_$1_$s.nml name=eval mode=eval init_from=$2 "val_files=$TEST_DIR/task$s/val_*.bin"
        sed -i 's/val_batches = 4/val_batches = 32/' $TEST_DIR/eval_$1_$s.nml
        $MPIRUN -np 1 ./llmtrain $TEST_DIR/eval_$1_$s.nml >$TEST_DIR/eval_$1_$s.log 2>&1 || fail "eval of $2 on task $s failed (log: $TEST_DIR/eval_$1_$s.log)"
        l=$(grep '^eval: val_loss' $TEST_DIR/eval_$1_$s.log | awk '{print $3}')
        [ -n "$l" ] || fail "eval of $2 on task $s: no val_loss line"
        sum="$sum + $l"
    done
    $PYTHON -c "print(repr(($sum) / 2))"
}
w_best=$($PYTHON -c "t = $t_best; print(repr(1 - t) + ', ' + repr(t))")
merge best "$w_best"
merge mid '0.5, 0.5'
recomputed=$(evaluate best $TEST_DIR/best.h5) || fail "$recomputed"
loss_a=$(evaluate a "$A") || fail "$loss_a"
loss_b=$(evaluate b "$B") || fail "$loss_b"
loss_mid=$(evaluate mid $TEST_DIR/mid.h5) || fail "$loss_mid"
printf '%-34s %s\n' "search best (t = $t_best)" "$obj_best" "recomputed (weights $w_best)" "$recomputed" \
    "parent A" "$loss_a" "parent B" "$loss_b" "0.5/0.5 merge" "$loss_mid"
$PYTHON -c "import sys; sys.exit(not abs($recomputed - $obj_best) <= 1e-6)" ||
    fail "the search's objective $obj_best differs from the recomputed $recomputed by more than 1e-6"

echo "== 4. the search beats both parents and the midpoint"
$PYTHON -c "import sys; sys.exit(not ($obj_best <= min($loss_a, $loss_b) and $obj_best <= $loss_mid))" ||
    fail "best $obj_best is above a parent ($loss_a, $loss_b) or the 0.5/0.5 merge ($loss_mid)"
echo "best $obj_best: below parent A by $($PYTHON -c "print('%.4f' % ($loss_a - $obj_best))"), parent B by" \
     "$($PYTHON -c "print('%.4f' % ($loss_b - $obj_best))"), the 0.5/0.5 merge by $($PYTHON -c "print('%.4f' % ($loss_mid - $obj_best))")"

echo "== 5. failures: one line, exit 2, no record"
expect_error() { # label 'sed expression' 'expected text'
    sed -e "$2" -e "s|name = 'merge-search'|name = 'bad-$1'|" $TEST_DIR/trial.nml >$TEST_DIR/bad-$1.nml
    src/tools/merge_trial.py $TEST_DIR/bad-$1.nml >$TEST_DIR/bad-$1.out 2>$TEST_DIR/bad-$1.err
    local rc=$? err
    err=$(cat $TEST_DIR/bad-$1.err)
    [ $rc -eq 2 ] && [ "$(wc -l <$TEST_DIR/bad-$1.err)" -eq 1 ] && [[ $err == "merge_trial: error: "*"$3"* ]] &&
        [ ! -e $TEST_DIR/bad-$1/metrics.jsonl ] || fail "$1: exit $rc, stderr '$err' (expected exit 2, one line with '$3', no metrics.jsonl)"
    echo "$1: exit 2: $err"
}
line=$(grep -n '^  t = 0.5 ' $TEST_DIR/trial.nml | cut -d: -f1)
expect_error key "s|^  t = 0.5 |  weigth_2 = 0.5 |" "bad-key.nml:$line:3: unknown key 'weigth_2' in group '&merge_trial' (valid keys: val_sets, set_names, t, weight_1, weight_2, ..., keep_merged); did you mean 'weight_2'?"
expect_error model "s|$B|$TEST_DIR/none.h5|" "llmmerge exited with 2: llmmerge: error: models(2) '$TEST_DIR/none.h5': cannot read"
expect_error shape "s|d_model = 64|d_model = 32|" "evaluation on set task_a (val_files '$TEST_DIR/task2/val_*.bin') exited with 2: llmtrain: error: &run init_from: "
sed -i "s|base = '$TEST_DIR/trial.nml'|base = '$TEST_DIR/bad-key.nml'|; s|name = 'merge'|name = 'bad'|" $TEST_DIR/study.nml
./llmsweep $TEST_DIR/study.nml >$TEST_DIR/bad-sweep.log 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "preflight.*unknown key 'weigth_2'" $TEST_DIR/bad-sweep.log ||
    { cat $TEST_DIR/bad-sweep.log; fail "llmsweep on a base with a bad &merge_trial key: exit $rc (expected 2, naming the key)"; }
echo "llmsweep preflight: exit 2: $(grep -o "unknown key 'weigth_2'[^(]*" $TEST_DIR/bad-sweep.log | head -1)"
echo "merge_weight_search: passed in $(($(date +%s) - T0)) s"
