#!/usr/bin/env bash
# Bad llmsweep input is one message and exit code 2, before any trial trains: each case below
# gives exactly one line on stderr, containing the expected text (which names the file:line:col,
# the key, the trial or the command), and no trial directory.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
[ -x ./llmsweep ] || make -s llmsweep >/dev/null || fail "make llmsweep failed"
write_tiny_nml "$TEST_DIR/base.nml" max_steps=5
printf '&run name = "x" /\n&train max_steps = 5,, lr = 1 /\n' >"$TEST_DIR/broken.nml"
n=0
# case 'sweep keys' 'space' 'expected text'
case_() {
    n=$((n + 1))
    local f=$TEST_DIR/case$n.nml
    printf "&sweep\n  base = '%s', out_dir = '%s/studies', name = 'c%d'\n  %s\n/\n&space\n  %s\n/\n" \
        "${BASE:-$TEST_DIR/base.nml}" "$TEST_DIR" $n "$1" "$2" >"$f"
    ./llmsweep "$f" >"$TEST_DIR/case$n.out" 2>"$TEST_DIR/case$n.err"
    local rc=$? lines
    lines=$(wc -l <"$TEST_DIR/case$n.err")
    printf 'case %2d: exit %d: %s\n' $n $rc "$(cat "$TEST_DIR/case$n.err")"
    [ $rc -eq 2 ] || fail "case $n: exit $rc, expected 2"
    [ "$lines" -eq 1 ] || fail "case $n: $lines lines on stderr, expected 1"
    grep -qF -- "$3" "$TEST_DIR/case$n.err" || fail "case $n: the message lacks '$3'"
    [ ! -d "$TEST_DIR/studies/c$n/trials" ] || [ -z "$(ls "$TEST_DIR/studies/c$n/trials")" ] ||
        fail "case $n: a trial was started"
}
L=train.lr
case_ "strategi = 'grid'" "$L = log(1e-3, 1e-2)" "case1.nml:3:3: unknown key 'strategi' in group '&sweep'"
grep -q "did you mean 'strategy'" "$TEST_DIR/case1.err" || fail "case 1: no 'did you mean'"
case_ "strategy = 'gird'" "$L = log(1e-3, 1e-2)" "case2.nml:3:14: &sweep key 'strategy': 'gird' is not one of grid, random, bayes"
case_ "strategy = 'grid'" "" "case3.nml:5:1: the search space is empty"
case_ "" "$L = log(0, 1e-2)" "case4.nml:6:14: &space key 'train.lr': log(0, 1e-2) needs lo > 0"
case_ "" "$L = uniform(1e-2, 1e-3)" "case5.nml:6:14: &space key 'train.lr': uniform(1e-2, 1e-3) is empty: lo must be below hi"
case_ "" "train.warmup_steps = int(5, 5)" "case6.nml:6:24: &space key 'train.warmup_steps': int(5, 5) is empty"
case_ "" "$L = lgo(1e-3, 1e-2)" "unknown range 'lgo(...)' for key 'train.lr' (valid: log, uniform, real, int, logint); did you mean 'log'?"
case_ "" "train.warmup_steps = int(0, 2.5)" "int(lo, hi) takes integers, got real 2.5"
case_ "" "model.d_model = {64, 128, 64}" "case9.nml:6:29: &space key 'model.d_model': choice 64 is given twice"
case_ "" "model.d_model = {}" "the choices {} are empty"
case_ "" "lr = log(1e-3, 1e-2)" "&space key 'lr' must be group.key"
case_ "" "run.out_dir = {'a', 'b'}" "&space key 'run.out_dir' is set by llmsweep for every trial"
case_ "max_trials = -1" "$L = log(1e-3, 1e-2)" "&sweep key 'max_trials' = -1 is out of range: at least 0"
case_ "scheduler = 'asha', min_steps = 10, max_steps = 10" "$L = log(1e-3, 1e-2)" "&sweep min_steps = 10 must be below max_steps = 10"
BASE=$TEST_DIR/missing.nml case_ "" "$L = log(1e-3, 1e-2)" "case15.nml:2:3: &sweep base: $TEST_DIR/missing.nml: No such file or directory"
BASE=$TEST_DIR/broken.nml case_ "" "$L = log(1e-3, 1e-2)" "broken.nml:2:22: empty value between commas for key 'max_steps'"
# the trainer: a program that does not exist, one mpirun cannot start, keys llmtrain refuses
case_ "launcher = 'none', command = './no-such-trainer {nml}'" "$L = log(1e-3, 1e-2)" \
    "preflight of trial t0000: the trainer command cannot run: ./no-such-trainer: No such file or directory"
case_ "trainer = './no-such-trainer', launcher = 'mpirun'" "$L = log(1e-3, 1e-2)" \
    "preflight of trial t0000 (its namelist for 0 steps): the trainer command failed with exit"
case_ "launcher = 'mpirun'" "train.lrr = {1}" "/preflight/trial.nml:18:3: &train unknown key 'lrr'"
case_ "launcher = 'mpirun', ranks_per_trial = 2, launcher_args = '--oversubscribe'" "$L = log(1e-3, 1e-2)" \
    "&parallel dp*tp*pp = 1*1*1 = 1 does not equal the 2 MPI ranks started"
# outside an allocation srun is either missing or (Slurm installed, e.g. by make deps) fails
case_ "launcher = 'srun'" "$L = log(1e-3, 1e-2)" "preflight of trial t0000"
grep -q "srun" "$TEST_DIR/case$n.err" || fail "case $n: the message does not name srun"
write_tiny_nml "$TEST_DIR/noval.nml" max_steps=5 val_files=''
BASE=$TEST_DIR/noval.nml case_ "launcher = 'mpirun'" "$L = log(1e-3, 1e-2)" \
    "case22.nml:1:1: objective = 'val_loss', but the base $TEST_DIR/noval.nml gives no validation loss"
echo "sweep_bad_input: $n cases, each one message and exit 2"
