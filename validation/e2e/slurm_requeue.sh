#!/usr/bin/env bash
# Requeue chains under a real Slurm (private, on localhost: lib_slurm.bash), with
# jobscripts/requeue.sbatch as shipped and a namelist that does NOT set &checkpoint resume:
#  1. a SIGUSR1 mid-run: llmtrain checkpoints and exits 75, the script requeues the job, the
#     requeued job continues from that checkpoint (a requeued job resumes by default) and
#     reaches the last step; every step is logged once (records of the first attempt after its
#     checkpoint, if any, are marked superseded) and the losses equal an uninterrupted run's, bit
#     for bit;
#  2. a 1-minute time limit with --signal=USR1@25: the chain requeues several times and completes,
#     again with every step once and the uninterrupted run's losses;
#  3. (no Slurm) &run time_limit_min: llmtrain stops itself in time (checkpoint, exit 75) and a
#     resumed run finishes with the same losses.
# Slurm holds a requeued job for about two minutes (BeginTime); the test releases it after 5 s,
# once the previous attempt's step daemons have exited.
# Steps are slowed to a known length on rank 0 (LLMT_FAULT=step@0:sleepN) so the job lasts long
# enough to be interrupted.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_slurm.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"

# every_step_once METRICS N: the non-superseded step records are steps 1..N, once each; prints
# their losses, one per line
every_step_once() {
    $PYTHON - "$1" "$2" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
steps = []
for line in open(path):
    r = json.loads(line)
    if "loss" in r and "superseded" not in r:
        steps.append((r["step"], r["loss"]))
got = [s for s, _ in steps]
if got != list(range(1, n + 1)):
    sys.exit(f"step records (not superseded) are {got[:5]}...{got[-5:]} ({len(got)}), expected 1..{n} once each")
for _, loss in steps:
    print(repr(loss))
PY
}

# reference: the same namelist uninterrupted, 2 ranks
write_tiny_nml "$TEST_DIR/ref.nml" name=ref dp=2 max_steps=200 val_every=0 val_files='' \
    extra_run="" extra_train=""
printf '&checkpoint\n  every = 25\n/\n' >>"$TEST_DIR/ref.nml"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/ref.nml" >"$TEST_DIR/ref.log" 2>&1 || fail "reference run failed"
every_step_once "$TEST_DIR/ref/metrics.jsonl" 200 >"$TEST_DIR/ref.losses" || fail "reference metrics"
# and a 40-step one (the learning-rate schedule depends on max_steps)
sed -e "s/name = 'ref'/name = 'ref40'/" -e "s/max_steps = 200/max_steps = 40/" "$TEST_DIR/ref.nml" >"$TEST_DIR/ref40.nml"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/ref40.nml" >"$TEST_DIR/ref40.log" 2>&1 || fail "40-step reference run failed"
every_step_once "$TEST_DIR/ref40/metrics.jsonl" 40 >"$TEST_DIR/ref40.losses" || fail "40-step reference metrics"

# 3. first, without Slurm: &run time_limit_min (12 s) with 0.2 s steps stops in time
sed -e "s/name = 'ref'/name = 'limit'/" -e "s/&run/\&run\n  time_limit_min = 0.2/" "$TEST_DIR/ref.nml" >"$TEST_DIR/limit.nml"
LLMT_FAULT=step@0:sleep200 LLMT_SIGNAL_MARGIN_S=1 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/limit.nml" >"$TEST_DIR/limit.log" 2>&1
rc=$?
[ $rc -eq 75 ] || { tail -20 "$TEST_DIR/limit.log"; fail "time_limit_min: exit $rc, expected 75"; }
grep -q "s left before the job ends (&run time_limit_min = 0.2): less than a step plus a save" "$TEST_DIR/limit.log" ||
    fail "time_limit_min: no time-limit message"
grep -q '"stopped_by":"time_limit","exit_code":75' "$TEST_DIR/limit/metrics.jsonl" || fail "time_limit_min: no stop record"
# a stop signal 1 s before the end (LLMT_SIGNAL_MARGIN_S, as requeue.sbatch exports its
# --signal=USR1@N) is too late for a step plus a save: said once
[ "$(grep -c "warning: the stop signal comes 1 s before the end" "$TEST_DIR/limit.log")" -eq 1 ] ||
    fail "time_limit_min: no (single) warning about a too short signal margin"
sed -i "s/  time_limit_min = 0.2//" "$TEST_DIR/limit.nml"
sed -i "s/&checkpoint/\&checkpoint\n  resume = 'auto'/" "$TEST_DIR/limit.nml"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/limit.nml" >"$TEST_DIR/limit2.log" 2>&1 || fail "time_limit_min: the resumed run failed"
every_step_once "$TEST_DIR/limit/metrics.jsonl" 200 >"$TEST_DIR/limit.losses" || fail "time_limit_min: metrics"
cmp -s "$TEST_DIR/limit.losses" "$TEST_DIR/ref.losses" || fail "time_limit_min: losses differ from the uninterrupted run"
echo "time_limit_min: stopped at step $(sed -n 's/.*"step":\([0-9]*\),"stopped_by".*/\1/p' "$TEST_DIR/limit/metrics.jsonl"), resumed, 200 steps once, losses identical"

slurm_start
export PATH=$PWD:$PATH
unset LLMTRAIN_HOME LLMT_BIN

# release_held JOB STATE (a slurm_wait hook): Slurm holds a requeued job (BeginTime); release it
# 5 s after the requeue, once the previous attempt's step daemons are gone: a new attempt of the
# same job id started at once finds their PMIx socket still bound or its credential revoked
# (Slurm's own two-minute hold covers that in real use).
HELD=0
release_held() {
    if [ "$2" = PENDING ] && [ "$(slurm_field "$1" Reason)" = BeginTime ]; then
        HELD=$((HELD + 1))
        [ $HELD -ge 10 ] && ! pgrep -f "slurmstepd: \[$1\." >/dev/null &&
            scontrol update JobId="$1" StartTime=now && HELD=0
    else
        HELD=0
    fi
    return 0
}

# 1. SIGUSR1 mid-run
sed -e "s/name = 'ref'/name = 'sig'/" -e "s/max_steps = 200/max_steps = 40/" "$TEST_DIR/ref.nml" >"$TEST_DIR/sig.nml"
grep -q resume "$TEST_DIR/sig.nml" && fail "the test namelist must not set resume"
jid=$(LLMT_FAULT=step@0:sleep100 sbatch --parsable --output="$TEST_DIR/sig-%j.out" jobscripts/requeue.sbatch "$TEST_DIR/sig.nml")
for i in $(seq 600); do grep -q '"step":15,' "$TEST_DIR/sig/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
grep -q '"step":15,' "$TEST_DIR/sig/metrics.jsonl" || { cat "$TEST_DIR/sig-$jid.out"; fail "signal: the job never reached step 15"; }
scancel --signal=USR1 "$jid"
state=$(slurm_wait "$jid" 240 release_held); out=$TEST_DIR/sig-$jid.out
[ "$state" = COMPLETED ] || { cat "$out"; fail "signal: job $jid ended $state"; }
[ "$(slurm_restarts "$jid")" -ge 1 ] || fail "signal: the job was not requeued"
grep -q "received SIGUSR1 at step" "$out" || fail "signal: no SIGUSR1 message"
grep -q "was requeued (SLURM_RESTART_COUNT = 1) and .* does not set &checkpoint resume: continuing" "$out" ||
    { cat "$out"; fail "signal: the requeued job did not resume by default"; }
every_step_once "$TEST_DIR/sig/metrics.jsonl" 40 >"$TEST_DIR/sig.losses" || fail "signal: metrics"
cmp -s "$TEST_DIR/sig.losses" "$TEST_DIR/ref40.losses" || {
    paste "$TEST_DIR/sig.losses" "$TEST_DIR/ref40.losses" | head; fail "signal: losses differ from the uninterrupted run"; }
grep -q '"event":"restart"' "$TEST_DIR/sig/metrics.jsonl" || fail "signal: no restart record"
echo "signal: job $jid requeued $(slurm_restarts "$jid") time(s), 40 steps once, losses identical to the uninterrupted run"

# 2. a 1-minute time limit, SIGUSR1 25 s before it, 0.3 s steps: several requeues
sed -e "s/name = 'ref'/name = 'tl'/" "$TEST_DIR/ref.nml" >"$TEST_DIR/tl.nml"
jid=$(LLMT_FAULT=step@0:sleep300 LLMT_SIGNAL_MARGIN_S=25 sbatch --parsable --time=1 --signal=USR1@25 \
      --output="$TEST_DIR/tl-%j.out" jobscripts/requeue.sbatch "$TEST_DIR/tl.nml")
state=$(slurm_wait "$jid" 600 release_held); out=$TEST_DIR/tl-$jid.out
[ "$state" = COMPLETED ] || { tail -40 "$out"; fail "time limit: job $jid ended $state"; }
restarts=$(slurm_restarts "$jid")
[ "$restarts" -ge 2 ] || { cat "$out"; fail "time limit: requeued $restarts times, expected several"; }
grep -q "time limit: the job ends at .* (the time limit of Slurm job $jid" "$out" ||
    fail "time limit: llmtrain did not learn the job's end time from Slurm"
every_step_once "$TEST_DIR/tl/metrics.jsonl" 200 >"$TEST_DIR/tl.losses" || fail "time limit: metrics"
cmp -s "$TEST_DIR/tl.losses" "$TEST_DIR/ref.losses" || fail "time limit: losses differ from the uninterrupted run"
stops=$(grep -o '"stopped_by":"[a-zA-Z0-9_]*"' "$TEST_DIR/tl/metrics.jsonl" | sort | uniq -c | tr '\n' ' ')
echo "time limit: job $jid requeued $restarts times (stops: $stops), 200 steps once, losses identical"
echo "slurm_requeue: signal chain, time-limit chain and time_limit_min all continue without loss"
