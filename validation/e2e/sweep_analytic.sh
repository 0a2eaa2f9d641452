#!/usr/bin/env bash
# llmsweep on analytic objectives through an analytic stand-in for llmtrain (validation/e2e/sweep_objective.py: Branin and
# a noisy quadratic, instantly, with llmtrain's namelist, metrics.jsonl, checkpoints and exit codes):
#  1. Branin (minimum 0.397887): evaluations until a trial is within 1% of the minimum (<= 0.401866),
#     seeds 1-5. Bayesian search (GP + EI, 10 random start-up trials) must reach it within 100 in every
#     seed, its median must be below random search's (capped at 60 trials per seed, counted as 61; the
#     analytic expectation is ~13,000), and not above Optuna's TPE (PyPI, default TPESampler, same
#     seeds, capped at 300) by more than 25%.
#  2. Noisy quadratic over a log, an integer and a categorical dimension (noise sd 0.05), 30 trials,
#     seeds 1-3: the median true value of the trial llmsweep calls best is lower for bayes than random.
#  3. ASHA, 27 trials, eta 3, rungs at 1, 3, 9 steps, 3 concurrent: exactly 18 stopped at rung 0, 6 at
#     rung 1, 3 complete; promoted trials resume from their own checkpoint (resumed_from = the rung
#     below); 63 steps in all instead of 243.
#  4. Budgets: max_tokens stops the study before the trial that would exceed it (3 of 256-token
#     trials under 1000) and says so; max_node_hours likewise; max_trials; failed trials are
#     recorded and the study goes on; max_failures stops it with exit 1.
#  5. Resume: kill -9 of llmsweep mid-study, then SIGTERM (exit 75), then a third run: the 30 trials
#     equal an uninterrupted run's (same seed: same points, same objectives), trials finished before
#     a kill are not re-run, the one killed mid-segment resumes from its checkpoint; a second
#     llmsweep on the same study directory is refused.
#  6. srun job steps (a fake srun that logs its arguments): --exact, --ntasks = ranks_per_trial, 2
#     concurrent; more ranks than SLURM_NTASKS is refused with exit 2.
source "$(dirname "$0")/lib.bash"
[ -x ./llmsweep ] || make -s llmsweep >/dev/null || fail "make llmsweep failed"
$PYTHON -c "import numpy" 2>/dev/null || { echo "SKIP: numpy missing for $PYTHON (make deps)"; exit 77; }
OBJECTIVE="$PYTHON validation/e2e/sweep_objective.py"
T0=$(date +%s)

# base NAME [objective keys...]: a base namelist for the analytic objective with 256 tokens per step
base() {
    local name=$1; shift
    cat >"$TEST_DIR/$name.base.nml" <<NML
! analytic-objective base for llmsweep tests
&run
  name = 'x', out_dir = 'runs', seed = 1
/
&train
  max_steps = 1, global_batch = 8, lr = 1e-3, warmup_steps = 0
/
&model
  seq_len = 32, d_model = 128
/
&checkpoint
  every = 1
/
&objective
  function = 'branin', x1 = 0.0, x2 = 0.0 $*
/
NML
}
# study NAME BASE 'sweep keys' 'space entries': write $TEST_DIR/NAME.nml
study() {
    cat >"$TEST_DIR/$1.nml" <<NML
&sweep
  name = '$1', out_dir = '$TEST_DIR/studies', base = '$TEST_DIR/$2.base.nml'
  launcher = 'none', command = '$OBJECTIVE {nml}'
  $3
/
&space
  $4
/
NML
}
BRANIN_SPACE="objective.x1 = uniform(-5, 10)
  objective.x2 = uniform(0, 15)"
# sweep NAME: run the study NAME; on a non-zero exit, show the end of its log and the exit code
sweep() {
    ./llmsweep "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { tail -5 "$TEST_DIR/$1.log"; echo "llmsweep $1: exit $rc"; }
    return $rc
}
# q NAME 'python expression over S (the state) and T (its trials)'
q() { $PYTHON -c "import json,sys; S=json.load(open('$TEST_DIR/studies/$1/study.json')); T=S['trials']; print($2)"; }
# evals NAME TARGET: the 1-based number of the first trial with objective <= TARGET, or "none"
evals() { q "$1" "next((t['id']+1 for t in T if t['objective'] is not None and t['objective'] <= $2), 'none')"; }
# best_true NAME: the noise-free value of the trial llmsweep reports best (lowest noisy objective)
best_true() {
    $PYTHON - "$TEST_DIR/studies/$1" <<'PY'
import json, sys
T = json.load(open(sys.argv[1] + "/study.json"))["trials"]
best = min((t for t in T if t["objective"] is not None), key=lambda t: t["objective"])
recs = [json.loads(l) for l in open("%s/trials/%s/metrics.jsonl" % (sys.argv[1], best["name"])) if "true_value" in l]
print("%.4f" % recs[-1]["true_value"])
PY
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "== 1. Branin: evaluations to within 1% of the minimum"
TARGET=0.401866 # 0.397887 * 1.01
base branin
B="" R="" ; t1=$(date +%s)
for seed in 1 2 3 4 5; do
    study "bayes$seed" branin "strategy = 'bayes', seed = $seed, max_trials = 100, target = $TARGET" "$BRANIN_SPACE"
    sweep "bayes$seed" || fail "bayes seed $seed"
    n=$(evals "bayes$seed" $TARGET)
    [ "$n" != none ] || fail "bayes seed $seed did not reach $TARGET in 100 trials (best $(q "bayes$seed" "min(t['objective'] for t in T)"))"
    B="$B $n"
done
t2=$(date +%s)
for seed in 1 2 3 4 5; do
    study "random$seed" branin "strategy = 'random', seed = $seed, max_trials = 60, target = $TARGET, concurrent = 2" "$BRANIN_SPACE"
    sweep "random$seed" || fail "random seed $seed"
    n=$(evals "random$seed" $TARGET)
    [ "$n" = none ] && n=61 # not reached within the cap: counted as 61 (an underestimate of random search)
    R="$R $n"
done
t3=$(date +%s)
mb=$(echo $B | median) mr=$(echo $R | median)
echo "bayes evaluations:$B (median $mb, $((t2 - t1)) s for 5 seeds); random:$R (median $mr, 61 = not within 60, $((t3 - t2)) s)"
$PYTHON - <<'PY'
import math, numpy as np
rng = np.random.default_rng(0)
x1, x2 = rng.uniform(-5, 10, 2_000_000), rng.uniform(0, 15, 2_000_000)
f = (x2 - 5.1 / (4 * math.pi ** 2) * x1 ** 2 + 5 / math.pi * x1 - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * np.cos(x1) + 10
p = (f <= 0.401866).mean()
print("random search analytically: P(within 1%%) = %.2g per draw, %.0f draws expected, P(within 60) = %.1f%%"
      % (p, 1 / p, 100 * (1 - (1 - p) ** 60)))
PY
awk -v b="$mb" -v r="$mr" 'BEGIN {exit !(b < r)}' || fail "bayes median $mb is not below random's $mr"
# Optuna lives in .deps/optuna (make deps), apart from .deps/python: it brings numpy 2
if PYTHONPATH=.deps/optuna $PYTHON -c "import optuna" 2>/dev/null; then
    O=$(PYTHONPATH=.deps/optuna $PYTHON - "$TARGET" <<'PY'
import sys
sys.path.insert(0, "validation/e2e")
import optuna
from sweep_objective import branin
optuna.logging.set_verbosity(optuna.logging.WARNING)
out = []
for seed in range(1, 6):
    st = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    n = 301
    for i in range(300):
        t = st.ask()
        v = branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15))
        st.tell(t, v)
        if v <= float(sys.argv[1]):
            n = i + 1
            break
    out.append(str(n))
print(" ".join(out), optuna.__version__)
PY
) || fail "optuna run failed"
    ver=${O##* } O=${O% *}
    mo=$(echo $O | median)
    echo "optuna $ver TPE evaluations: $O (median $mo; 301 = not within 300)"
    awk -v b="$mb" -v o="$mo" 'BEGIN {exit !(b <= 1.25 * o)}' || fail "bayes median $mb is worse than 1.25 x optuna TPE's $mo"
else
    echo "optuna is not installed in .deps/optuna: the TPE comparison is not made (make deps installs it)"
    OPTUNA_MISSING=1
fi

echo "== 2. noisy quadratic (log, integer, categorical; noise sd 0.05): true value of the best trial"
base quad "function = 'quadratic', noise = 0.05"
QSPACE="train.lr = log(1e-5, 1e-1)
  train.warmup_steps = int(0, 200)
  model.d_model = {64, 128, 256}"
QB="" QR=""
for seed in 1 2 3; do
    for s in bayes random; do
        study "q$s$seed" quad "strategy = '$s', seed = $seed, max_trials = 30" "$QSPACE"
        sweep "q$s$seed" || fail "quadratic $s seed $seed"
    done
    tb=$(best_true "qbayes$seed") tr=$(best_true "qrandom$seed")
    QB="$QB $tb" QR="$QR $tr"
done
qb=$(echo $QB | median) qr=$(echo $QR | median)
echo "true value of the best trial (minimum 0): bayes$QB (median $qb), random$QR (median $qr)"
awk -v b="$qb" -v r="$qr" 'BEGIN {exit !(b < r)}' || fail "noisy quadratic: bayes median $qb is not below random's $qr"
grep -q "model.d_model = 128" "$TEST_DIR/studies/qbayes1/best.nml" ||
    echo "note: bayes seed 1's best.nml does not pick d_model = 128 (the categorical optimum)"

echo "== 3. ASHA: 27 trials, eta 3, rungs 1 3 9"
base asha "curve = 1.0"
study asha asha "strategy = 'random', seed = 7, max_trials = 27, scheduler = 'asha', eta = 3, min_steps = 1, max_steps = 9, concurrent = 3" "$BRANIN_SPACE"
sweep asha || fail "asha"
got=$(q asha "(sum(1 for t in T if t['status']=='stopped' and t['rung']==0), sum(1 for t in T if t['status']=='stopped' and t['rung']==1), sum(1 for t in T if t['status']=='completed'), sum(t['steps'] for t in T), len(T))")
echo "stopped at rung 0, at rung 1, completed, steps in all, trials: $got"
[ "$got" = "(18, 6, 3, 63, 27)" ] || fail "asha: expected (18, 6, 3, 63, 27), got $got"
grep -q "stopped by asha at rung 0 (1 steps): 18 trials" "$TEST_DIR/asha.log" || fail "asha: no message for rung 0"
grep -q "^| 1 | 3 | 9 | 3 | 6 |" "$TEST_DIR/studies/asha/results.md" || fail "asha: results.md lacks the rung table row '| 1 | 3 | 9 | 3 | 6 |'"
bad=$(q asha "[t['name'] for t in T if t['rung'] > 0]" | tr -d "[]',")
for name in $bad; do
    m=$TEST_DIR/studies/asha/trials/$name/metrics.jsonl
    from=$(grep -o '"resumed_from": [0-9]*' "$m" | awk '{print $2}' | tr '\n' ' ')
    case "$from" in "0 1 " | "0 1 3 ") ;; *) fail "asha: $name resumed from '$from', expected '0 1 ' or '0 1 3 '" ;; esac
done
echo "promoted trials resume from the rung below: $(echo $bad | wc -w) trials checked"

echo "== 4. budgets and failures"
study tokens branin "strategy = 'random', seed = 1, max_trials = 50, max_tokens = 1000" "$BRANIN_SPACE"
sweep tokens || fail "max_tokens"
n=$(q tokens "len(T)")
grep "max_tokens = 1000: 768 tokens trained or planned, and the next trial (t0003, 1 steps of 256 tokens) would exceed it" \
    "$TEST_DIR/tokens.log" || { tail -3 "$TEST_DIR/tokens.log"; fail "max_tokens: no message naming the budget"; }
[ "$n" -eq 3 ] || fail "max_tokens: $n trials ran, expected 3 (3 x 256 <= 1000 < 4 x 256)"
base slow "sleep_s = 0.3"
study hours slow "strategy = 'random', seed = 1, max_trials = 50, max_node_hours = 0.0005" "$BRANIN_SPACE"
sweep hours || fail "max_node_hours"
grep -q "no more trials are launched: max_node_hours = 0.0005" "$TEST_DIR/hours.log" || fail "max_node_hours: no message"
got=$(q hours "(len(T), round(sum(t['node_hours'] for t in T), 6))")
echo "max_node_hours = 0.0005 (1.8 s of one node): trials, node-hours used: $got"
# the budget is kept on estimates (the slowest step rate seen so far): allow one trial's overshoot
$PYTHON -c "n, h = $got; exit(not (2 <= n < 50 and h <= 0.0005 * 1.2))" || fail "max_node_hours: $got"
study trials branin "strategy = 'random', seed = 1, max_trials = 4" "$BRANIN_SPACE"
sweep trials && [ "$(q trials "len(T)")" -eq 4 ] && grep -q "max_trials = 4 reached" "$TEST_DIR/trials.log" || fail "max_trials = 4"
base fails "fail_x1_above = 2.5"
study fails fails "strategy = 'random', seed = 2, max_trials = 12, max_failures = 0" "$BRANIN_SPACE"
sweep fails || fail "failures"
got=$(q fails "(sum(t['status']=='failed' for t in T), sum(t['status']=='completed' for t in T))")
echo "x1 > 2.5 fails: failed, completed of 12: $got"
$PYTHON -c "f, c = $got; exit(not (f > 0 and c > 0 and f + c == 12))" || fail "failures: $got"
grep -q "| exit 3: objective: error: x1 = .* is above fail_x1_above" "$TEST_DIR/studies/fails/results.md" || fail "failures: reason not in results.md"
base allfail "fail_x1_above = -10"
study allfail allfail "strategy = 'random', seed = 2, max_trials = 12, max_failures = 3, preflight = .false." "$BRANIN_SPACE"
sweep allfail
rc=$?
[ $rc -eq 1 ] && [ "$(q allfail "len(T)")" -eq 3 ] && grep -q "3 trials failed in a row (max_failures = 3)" "$TEST_DIR/allfail.log" ||
    fail "max_failures = 3: exit $rc, $(q allfail "len(T)") trials"

echo "== 5. resume after kill -9 and after SIGTERM"
base resume "step_sleep_s = 0.05" # 1 step of 0.05 s ... with 10 steps per trial (below): 0.5 s a trial
sed -i "s/max_steps = 1,/max_steps = 10,/" "$TEST_DIR/resume.base.nml"
# the same study as bayes1 except its base's sleep (which changes no objective) and max_steps
study resume resume "strategy = 'bayes', seed = 1, max_trials = 100, target = $TARGET" "$BRANIN_SPACE"
completed() { q resume "sum(t['status']=='completed' for t in T)" 2>/dev/null || echo 0; }
run_until() { # N: start llmsweep in the background, return once N trials are complete and the
    # next one is inside its segment (its checkpoint at step 2..8 of 10)
    ./llmsweep "$TEST_DIR/resume.nml" >>"$TEST_DIR/resume.log" 2>&1 &
    SWEEP_PID=$!
    local i name
    for i in $(seq 1200); do
        if [ "$(completed)" -ge "$1" ]; then
            name=$(q resume "' '.join(t['name'] for t in T if t['status']=='running')" 2>/dev/null)
            [ -n "$name" ] && grep -q '"step": [2-8]}' "$TEST_DIR/studies/resume/trials/$name/objective_ckpt.json" 2>/dev/null &&
                return 0
        fi
        kill -0 $SWEEP_PID 2>/dev/null || fail "resume: llmsweep ended before $1 trials were complete"
        sleep 0.02
    done
    fail "resume: $1 trials not complete in 60 s"
}
run_until 8
./llmsweep "$TEST_DIR/resume.nml" >"$TEST_DIR/resume.second.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "the study directory is in use by llmsweep pid $SWEEP_PID" "$TEST_DIR/resume.second.log" ||
    { cat "$TEST_DIR/resume.second.log"; fail "a second llmsweep on the study: exit $rc, not refused"; }
kill -9 $SWEEP_PID
wait $SWEEP_PID 2>/dev/null
before_kill=$(q resume "' '.join(t['name'] for t in T if t['status']=='completed')")
running=$(q resume "' '.join(t['name'] for t in T if t['status']=='running')")
echo "killed llmsweep (kill -9) with $(echo $before_kill | wc -w) trials complete, running: $running"
[ -n "$running" ] || fail "resume: no trial was running at the kill"
run_until 16
kill -TERM $SWEEP_PID
wait $SWEEP_PID
rc=$?
[ $rc -eq 75 ] || fail "resume: SIGTERM: llmsweep exited $rc, expected 75"
grep -q "stopped by SIGTERM" "$TEST_DIR/resume.log" || fail "resume: no message for SIGTERM"
./llmsweep "$TEST_DIR/resume.nml" >>"$TEST_DIR/resume.log" 2>&1 || fail "resume: the third run exited $?"
same=$($PYTHON - "$TEST_DIR/studies" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/bayes1/study.json"))["trials"]
b = json.load(open(sys.argv[1] + "/resume/study.json"))["trials"]
diff = [t["name"] for t, u in zip(a, b) if t["params"] != u["params"] or t["objective"] != u["objective"]]
print(len(a), len(b), "same" if not diff and len(a) == len(b) else "differ at " + " ".join(diff[:3]))
PY
)
echo "uninterrupted vs killed + stopped + continued: trials $same"
case "$same" in *" same") ;; *) fail "resume: the continued study differs from the uninterrupted one: $same" ;; esac
for name in $before_kill; do
    [ "$(q resume "[t for t in T if t['name']=='$name'][0].get('launches')")" = 1 ] || fail "resume: $name finished before the kill but was launched again"
done
for name in $running; do
    m=$TEST_DIR/studies/resume/trials/$name/metrics.jsonl
    grep -q '"stopped_by": "SIGTERM"' "$m" || fail "resume: $name did not get SIGTERM when llmsweep was killed"
    grep -q '"resumed_from": [1-9]' "$m" || fail "resume: $name did not resume from its checkpoint"
done
echo "trials finished before the kill were not re-run; $running resumed from its checkpoint"

echo "== 6. srun job steps (a fake srun)"
mkdir -p "$TEST_DIR/bin"
cat >"$TEST_DIR/bin/srun" <<SH
#!/bin/sh
# fake srun: log the arguments, run the program after the options
echo "\$*" >>"$TEST_DIR/srun.args"
while [ \$# -gt 0 ]; do case "\$1" in --*) shift ;; *) break ;; esac; done
exec "\$@"
SH
chmod +x "$TEST_DIR/bin/srun"
cat >"$TEST_DIR/objective_trainer" <<SH
#!/bin/sh
exec $OBJECTIVE "\$@"
SH
chmod +x "$TEST_DIR/objective_trainer"
study srun branin "strategy = 'random', seed = 1, max_trials = 4, launcher = 'srun', trainer = '$TEST_DIR/objective_trainer', ranks_per_trial = 2, concurrent = 2" "$BRANIN_SPACE"
sed -i "/command = /d" "$TEST_DIR/srun.nml"
PATH=$TEST_DIR/bin:$PATH SLURM_JOB_ID=123 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=4 sweep srun || fail "srun"
head -1 "$TEST_DIR/srun.args"
[ "$(grep -c -- '--exact --ntasks=2 --cpu-bind=none --kill-on-bad-exit=1 --job-name=srun-t000' "$TEST_DIR/srun.args")" -eq 4 ] ||
    fail "srun: expected 4 job steps with --exact --ntasks=2 (see $TEST_DIR/srun.args)"
[ "$(q srun "(sum(t['status']=='completed' for t in T), round(sum(t['node_hours'] for t in T) / sum(t['wall_s'] for t in T) * 3600, 3))")" = "(4, 0.5)" ] ||
    fail "srun: 4 trials completed, charged half a node each (2 of 4 tasks per node): $(q srun "[t['status'] for t in T]")"
PATH=$TEST_DIR/bin:$PATH SLURM_JOB_ID=123 SLURM_NTASKS=3 ./llmsweep "$TEST_DIR/srun.nml" >"$TEST_DIR/srun.bad.log" 2>&1
rc=$?
cat "$TEST_DIR/srun.bad.log"
[ $rc -eq 2 ] && grep -q "concurrent = 2 trials x ranks_per_trial = 2 ranks need 4 tasks, but this Slurm allocation has 3" "$TEST_DIR/srun.bad.log" ||
    fail "srun: too many ranks for the allocation: exit $rc"
echo "sweep_analytic: all checks passed in $(($(date +%s) - T0)) s"
[ -z "${OPTUNA_MISSING:-}" ] || { echo "SKIP: everything passed but the Optuna TPE comparison (no optuna in .deps/optuna: make deps)"; exit 77; }
