#!/usr/bin/env bash
# A real llmsweep study of the tiny model, end to end: 8 trials of lr = log(1e-3, 1e-2) x
# warmup_steps = int(0, 20), Bayesian search (4 random start-up trials), ASHA with eta 2 and rungs at
# 20, 40, 80 steps, 2 trials at a time of 1 rank each through mpirun. The base has a constant LR
# after warmup, so a trial's schedule does not depend on its max_steps and a promoted trial that
# resumed at each rung must equal a fresh run of the same configuration.
#  1. The study is stopped by SIGTERM while trials run (exit 75; llmtrain checkpoints them), then
#     run again to the end (exit 0).
#  2. 8 trials: 4 stopped at rung 0 (20 steps), 2 at rung 1 (40), 2 complete (80).
#  3. Every trial's metrics.jsonl holds each of its steps exactly once (1..20, 1..40 or 1..80):
#     promoted trials and those the SIGTERM interrupted continued from their own checkpoints (their
#     logs say so), none restarted.
#  4. The complete trials' val_loss at 80 steps is below their own at 20.
#  5. best.nml is a ready namelist: llmtrain runs it fresh and reaches the best trial's val_loss at
#     step 80 bit for bit.
#  6. results.md, results.csv (8 rows) and, with matplotlib, the two plots exist.
#  7. A grid over string and logical choices (lr_schedule x shuffle, 4 trials, objective 'loss') on
#     a base written in llmtrain's other spellings ($group ... $end, &end, double quotes, blank-
#     separated values, comments holding '/' and quotes): llmtrain accepts every generated namelist
#     and echoes each trial's values.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
[ -x ./llmsweep ] || make -s llmsweep >/dev/null || fail "make llmsweep failed"
T0=$(date +%s)
write_tiny_nml "$TEST_DIR/base.nml" schedule=constant val_every=20 max_steps=80
cat >"$TEST_DIR/study.nml" <<NML
! the tiny model's learning rate and warmup, 8 trials
&sweep
  name = 'tiny', out_dir = '$TEST_DIR/studies', base = '$TEST_DIR/base.nml'
  strategy = 'bayes', n_startup = 4, seed = 3, max_trials = 8
  scheduler = 'asha', eta = 2, min_steps = 20, max_steps = 80
  launcher = 'mpirun', launcher_args = '--oversubscribe', ranks_per_trial = 1, concurrent = 2
/
&space
  train.lr = log(1e-3, 1e-2)
  train.warmup_steps = int(0, 20)
/
NML
S=$TEST_DIR/studies/tiny
q() { $PYTHON -c "import json,sys; S=json.load(open('$S/study.json')); T=S['trials']; print($1)"; }

echo "== 1. SIGTERM while trials run, then the rest of the study"
./llmsweep "$TEST_DIR/study.nml" >"$TEST_DIR/sweep.log" 2>&1 &
pid=$!
for i in $(seq 600); do
    n=$(q "sum(1 for t in T if t['results'])" 2>/dev/null || echo 0)
    r=$(q "sum(1 for t in T if t['status'] == 'running')" 2>/dev/null || echo 0)
    [ "$n" -ge 3 ] && [ "$r" -ge 1 ] && break
    kill -0 $pid 2>/dev/null || { cat "$TEST_DIR/sweep.log"; fail "llmsweep ended early"; }
    sleep 0.1
done
sleep 0.7 # inside the running trials' steps
kill -TERM $pid
wait $pid
rc=$?
interrupted=$(q "' '.join(t['name'] for t in T if t['status'] == 'running')")
echo "SIGTERM: llmsweep exited $rc; trials stopped while running: $interrupted"
[ $rc -eq 75 ] || { tail "$TEST_DIR/sweep.log"; fail "SIGTERM: exit $rc, expected 75"; }
./llmsweep "$TEST_DIR/study.nml" >>"$TEST_DIR/sweep.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail -20 "$TEST_DIR/sweep.log"; fail "llmsweep exited $rc"; }
grep -E "reached rung|done:|stopped by|promoted|study done" "$TEST_DIR/sweep.log"

echo "== 2. ASHA: 8 trials, rungs 20 40 80"
got=$(q "(len(T), sum(t['status']=='stopped' and t['rung']==0 for t in T), sum(t['status']=='stopped' and t['rung']==1 for t in T), sum(t['status']=='completed' for t in T))")
echo "trials, stopped at rung 0, at rung 1, complete: $got"
[ "$got" = "(8, 4, 2, 2)" ] || fail "expected (8, 4, 2, 2), got $got"

echo "== 3. every trial's steps ran once: promoted and interrupted trials continued from checkpoints"
for name in $(q "' '.join(t['name'] for t in T)"); do
    m=$S/trials/$name/metrics.jsonl
    last=$(q "[t for t in T if t['name'] == '$name'][0]['steps']")
    steps=$(grep '"loss"' "$m" | sed 's/.*"step":\([0-9]*\),.*/\1/' | tr '\n' ' ')
    [ "$steps" = "$(seq -s ' ' 1 "$last") " ] || fail "$name: metrics.jsonl steps are '$steps', expected 1..$last once each"
    resumes=$(grep -c '^resume: .*ckpt_step' "$S/trials/$name/trial.log")
    case " $interrupted " in *" $name "*) how="interrupted by the SIGTERM$(grep -q stopped_by "$m" && echo ' inside its steps')" ;; *) how="" ;; esac
    if [ "$last" -gt 20 ]; then
        grep -q "^resume: .*ckpt_step00000020.h5: step 20" "$S/trials/$name/trial.log" || fail "$name: did not resume from step 20"
    fi
    echo "$name: steps 1..$last once each, $resumes resumes from checkpoints $how"
done
echo "== 4. the complete trials learned"
$PYTHON - "$S/study.json" <<'PY' || fail "a complete trial's val_loss did not fall from rung 0 to the end"
import json, sys
T = json.load(open(sys.argv[1]))["trials"]
ok = True
for t in T:
    if t["status"] == "completed":
        a, b = t["results"]["20"], t["results"]["80"]
        print("%s: lr %.3g warmup %d: val_loss %.4f at 20 -> %.4f at 80" % (t["name"], t["params"]["train.lr"],
              t["params"]["train.warmup_steps"], a, b))
        ok &= b < a
sys.exit(not ok)
PY

echo "== 5. best.nml runs as it is and gives the best trial's val_loss"
best=$(q "min((t for t in T if t['status']=='completed'), key=lambda t: t['objective'])['objective']")
grep -q "name = 'tiny-best'" "$S/best.nml" || fail "best.nml: no &run name = 'tiny-best'"
$MPIRUN -np 1 ./llmtrain "$S/best.nml" >"$TEST_DIR/best.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail "$TEST_DIR/best.log"; fail "llmtrain best.nml exited $rc"; }
fresh=$(grep '"step":80,"val_loss"' "$TEST_DIR/tiny-best/metrics.jsonl" | sed 's/.*"val_loss":\([^}]*\)}.*/\1/')
echo "best trial val_loss at 80 (ASHA: 20 + 20 + 40 steps, resumed twice): $best; fresh run of best.nml: $fresh"
$PYTHON -c "import sys; sys.exit(not (float('$best') == float('$fresh')))" || fail "best.nml gives $fresh, the trial $best"

echo "== 6. results"
[ "$(($(wc -l <"$S/results.csv") - 1))" -eq 8 ] || fail "results.csv has not 8 rows"
grep -q "^\*\*Best: " "$S/results.md" || fail "results.md names no best trial"
if $PYTHON -c "import matplotlib" 2>/dev/null; then
    for f in objective_vs_trial.png objective_vs_params.png; do [ -s "$S/$f" ] || fail "no $f"; done
    echo "plots: $(ls "$S"/*.png | tr '\n' ' ')"
else
    echo "note: matplotlib missing: no plots (make deps installs python3-matplotlib)"
fi
echo "== 7. grid over string and logical choices, on a base in other spellings"
cat >"$TEST_DIR/base2.nml" <<'NML'
! the tiny model in llmtrain's other spellings: $group / $end, &end, "strings", comments with / and '
$run name = 'x', out_dir = 'runs' ! a comment / with a slash and a 'quote'
  seed = 1337 $end
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 1 &end
&train
  max_steps = 6, micro_batch = 4, global_batch = 8, lr = 3e-3, warmup_steps = 2
  lr_schedule = "cosine"    ! "double quotes"
  beta1 = 0.9 beta2 = 0.95
/
&data train_files = 'data/tiny/train_*.bin', val_files = 'data/tiny/val_*.bin', shuffle = F /
&log every = 1 /
NML
cat >"$TEST_DIR/grid.nml" <<NML
&sweep name = 'grid', out_dir = '$TEST_DIR/studies', base = '$TEST_DIR/base2.nml', strategy = 'grid'
  objective = 'loss', launcher = 'mpirun', concurrent = 2 /
&space train.lr_schedule = {'constant', 'cosine'}, data.shuffle = {.true., .false.} /
NML
./llmsweep "$TEST_DIR/grid.nml" >"$TEST_DIR/grid.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail "$TEST_DIR/grid.log"; fail "grid study exited $rc"; }
G=$TEST_DIR/studies/grid/trials
for t in t0000:constant:true t0001:constant:false t0002:cosine:true t0003:cosine:false; do
    IFS=: read -r name sched shuf <<<"$t"
    grep -q "^  lr_schedule     = '$sched'" "$G/$name/trial.log" && grep -q "^  shuffle         = .$shuf." "$G/$name/trial.log" ||
        fail "grid: $name did not run with lr_schedule = '$sched', shuffle = .$shuf. (see $G/$name/trial.nml)"
    [ "$(grep -c '"loss"' "$G/$name/metrics.jsonl")" -eq 6 ] || fail "grid: $name did not train 6 steps"
done
echo "grid: 4 trials ran with their lr_schedule and shuffle: $(grep -o 'best t000.*' "$TEST_DIR/grid.log")"
echo "sweep_tiny: passed in $(($(date +%s) - T0)) s"
