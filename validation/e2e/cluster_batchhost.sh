#!/usr/bin/env bash
# The node that runs the batch script dies mid-run on the emulated cluster (validation/cluster/
# up.sh 4, kill-node.sh 1) under jobscripts/elastic.sbatch (--no-kill) with &run elastic =
# 'shrink': dp 4, one rank per node, a checkpoint every 10 steps, steps slowed to >= 60 ms
# (LLMT_FAULT step sleep) so the kill lands mid-run. The batch script dies with n1, so nothing
# in it can relaunch; Slurm alone would leave the job RUNNING and idle until its time limit.
# Checks: the ranks' watchdog (&checkpoint timeout_s = 10) runs the jobscript's guard
# (LLMT_HANG_HOOK), which finds n1 silent (a job step on it, LLMT_PROBE_S = 8) and requeues the
# job within 45 s of the kill (bound: watchdog 10 s + probe 8 s + slack), saying so in the job's
# output; every checkpoint written before the kill stays as it was; the requeued job waits for 4
# nodes (pending while n1 is down) and, once n1 is back (revive-node.sh), resumes from the
# newest checkpoint (resume = 'auto' for a requeued job) and completes, its steps bit-identical
# to an uninterrupted dp 4 run (mpirun on one node). Then &run elastic = 'off': the batch host
# dies again and the guard cancels the job, with its message, within the same bound. Skipped,
# with the reason, where namespaces cannot be made. Everything the cluster started is stopped on
# exit.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
source "$(dirname "$0")/lib_cluster.bash"
cluster_start llmtbh 4
export LLMT_PROBE_S=8
RUNS=$PWD/$TEST_DIR
elastic_dp4_args bh
# job_field JOB KEY: one field of scontrol show job
job_field() { scontrol -o show job "$1" 2>/dev/null | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }
# kill_batch_host JOB OUT NAME: when run NAME has 24 steps and a step-20 checkpoint, kill the
# job's batch host (n1); sets t_kill
kill_batch_host() {
    wait_steps "$RUNS/$3/metrics.jsonl" 24 && [ -f "$RUNS/$3/ckpt_step00000020.h5" ] ||
        { tail -20 "$2"; fail "$3: the run did not reach step 24 with a step-20 checkpoint"; }
    [ "$(job_field "$1" BatchHost)" = n1 ] || fail "job $1 runs its batch script on $(job_field "$1" BatchHost), not n1"
    $CL/kill-node.sh 1 2>>"$TEST_DIR/up.log"
    t_kill=$(date +%s)
}

jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/bh-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}") || fail "sbatch refused elastic.sbatch"
out=$RUNS/bh-$jid.out
kill_batch_host "$jid" "$out" bh
before=$(ls "$RUNS/bh"/ckpt_step*.h5 | sort)
sha_before=$(sha256sum $before)
restarts=0
for _ in $(seq 120); do
    restarts=$(job_field "$jid" Restarts)
    [ "${restarts:-0}" -ge 1 ] && break
    sleep 0.5
done
t_requeue=$(date +%s)
[ "${restarts:-0}" -ge 1 ] || { tail -20 "$out"; scontrol -o show job "$jid"; fail "job $jid was not requeued within 60 s of its batch host's death"; }
requeued=$((t_requeue - t_kill))
grep "^llmtrain job: .* the batch host n1 does not answer" "$out" ||
    { tail -20 "$out"; fail "the job output does not say that the batch host n1 was lost"; }
grep -q "does not answer within 8 s (the batch script died with it): requeueing job $jid" "$out" ||
    fail "the job output does not say the job is requeued"
[ "$requeued" -le 45 ] || fail "job $jid was requeued $requeued s after the kill (bound: watchdog 10 s + probe 8 s + 27 s)"
echo "batch host n1 killed; job $jid requeued $requeued s later (watchdog 10 s, probe <= 8 s)"
# the requeued job waits for 4 nodes: pending while n1 is down (Slurm marks it after SlurmdTimeout)
why=$(pending_on_down "$jid")
[ -n "$why" ] || { scontrol -o show job "$jid"; fail "the requeued job is not pending on the down node"; }
echo "requeued job $jid waits: $why ($(( $(date +%s) - t_kill )) s after the kill)"
for f in $before; do [ -f "$f" ] || fail "checkpoint $f written before the kill is gone"; done
[ "$(sha256sum $before)" = "$sha_before" ] || fail "a checkpoint written before the kill changed"
$CL/revive-node.sh 1 2>>"$TEST_DIR/up.log" || fail "node n1 did not come back"
t_rev=$(date +%s)
state=$(slurm_wait_gone "$jid" 180)
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "job $jid ended $state after n1 came back"; }
resumed=$(sed -n 's/^resume: \([^:]*\): step \([0-9]*\),.*continuing on dp 4 x .*/\1 \2/p' "$out" | tail -1)
[ -n "$resumed" ] || { grep "^resume" "$out"; fail "the requeued job did not resume on dp 4"; }
ck=${resumed% *} k=${resumed#* }
[ "$ck" = "$(echo "$before" | tail -1)" ] || fail "resumed from $ck, not the newest checkpoint written before the kill"
$MPIRUN -np 4 ./llmtrain "${ARGS[@]}" run.name=ref4 run.elastic="'off'" >"$RUNS/ref4.log" 2>&1 ||
    { tail "$RUNS/ref4.log"; fail "the uninterrupted dp 4 reference failed"; }
same_last_steps ref4 bh $((STEPS - k)) "steps $((k + 1))-$STEPS after the requeue differ from the uninterrupted dp 4 run"
echo "job $jid ran again on 4 nodes ($restarts requeue), resumed from $ck (step $k) and completed $(( $(date +%s) - t_rev )) s after n1 came back: steps $((k + 1))-$STEPS bit-identical to an uninterrupted dp 4 run"

# elastic = 'off': the batch host dies again; the guard ends the job (cancelled, with its message)
jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/off-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}" run.name=off run.elastic="'off'") || fail "sbatch refused elastic.sbatch (off)"
out=$RUNS/off-$jid.out
kill_batch_host "$jid" "$out" off
why="the batch host n1 does not answer within 8 s (the batch script died with it): &run elastic = 'off': cancelling job $jid"
for _ in $(seq 120); do grep -q "$why" "$out" && break; sleep 0.5; done
said=$(( $(date +%s) - t_kill ))
grep -q "$why" "$out" || { tail -20 "$out"; fail "off: the job output does not say why the job is cancelled"; }
[ "$said" -le 45 ] || fail "off: the guard cancelled job $jid $said s after the kill (bound 45 s)"
state=$(slurm_wait_gone "$jid" 60)
[ "$state" = CANCELLED ] || { tail -20 "$out"; fail "off: job $jid is $state (expected CANCELLED by the guard)"; }
echo "off: batch host n1 killed; the guard cancelled job $jid $said s later, with its reason in the output; it left the queue $(( $(date +%s) - t_kill )) s after the kill (n1 DOWN)"
