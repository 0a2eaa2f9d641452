#!/usr/bin/env bash
# A node dies mid-run on the emulated cluster (validation/cluster/up.sh 4, kill-node.sh 3) under
# jobscripts/elastic.sbatch with &run elastic = 'shrink', min_nodes = 2: dp 4, one rank per node,
# global batch 16, a checkpoint every 10 steps, steps slowed to >= 60 ms (LLMT_FAULT step sleep)
# so the kill lands mid-run. Checks: the stuck ranks end within the watchdog bound
# (&checkpoint timeout_s = io_timeout_s = 10) and the job names the lost node and its rank; no
# checkpoint written before the kill is lost (each still verifies: h5 checksum attribute read
# back by llmtrain itself on resume); the job continues in its allocation on 2 of the 3 nodes
# that answer (dp 3 cannot hold the global batch of 16 with micro-batch 4: dp 2, accumulation 2)
# from the newest checkpoint and completes; its steps after the restart are bit-identical to a
# run started on dp 2 from that checkpoint (mpirun on one node). Then &run elastic = 'wait': node
# n4 dies, the job names it, requeues itself, waits, and continues on 4 nodes when the
# node is back (revive-node.sh), bit-identical to an uninterrupted run. Skipped, with the reason, where
# namespaces cannot be made. Everything the cluster started is stopped on exit.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
source "$(dirname "$0")/lib_cluster.bash"
cluster_start llmtel 4
export LLMT_PROBE_S=8
RUNS=$PWD/$TEST_DIR
elastic_dp4_args el 90
t0=$(date +%s)
jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/el-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}") || fail "sbatch refused elastic.sbatch"
out=$RUNS/el-$jid.out
wait_steps "$RUNS/el/metrics.jsonl" 24
[ -f "$RUNS/el/ckpt_step00000020.h5" ] || { tail -20 "$out"; fail "the run did not reach step 24 with a step-20 checkpoint"; }
$CL/kill-node.sh 3 2>>"$TEST_DIR/up.log"
t_kill=$(date +%s)
before=$(ls "$RUNS/el"/ckpt_step*.h5 | sort)
sha_before=$(sha256sum $before)
watch_job "$jid" "$out"
[ "$state" = COMPLETED ] || { tail -40 "$out"; fail "the elastic job $jid ended $state (expected COMPLETED on the survivors)"; }
grep "^llmtrain job:" "$out"
grep -q "lost node(s) n3 (ranks 2-2 of dp 4 x tp 1 x pp 1)" "$out" || fail "the job output does not name node n3 and its rank 2"
named=$((t_named - t_kill))
[ "$named" -le 50 ] || fail "the lost node was named $named s after the kill (bound: watchdog 10 s + probe 8 s + 30 s)"
echo "node n3 killed; named with its rank $named s later (watchdog 10 s, probe <= 8 s)"
grep -q "continuing on 2 node(s) n1 n2 from the newest checkpoint: dp 4 -> 2" "$out" ||
    { tail -30 "$out"; fail "the job did not continue on n1 n2 with dp 2"; }
# nothing saved before the kill is lost: each checkpoint is still there with the same bytes
for f in $before; do
    [ -f "$f" ] || fail "checkpoint $f written before the kill is gone"
done
[ "$(sha256sum $before)" = "$sha_before" ] || fail "a checkpoint written before the kill changed"
resumed=$(sed -n 's/^resume: \([^:]*\): step \([0-9]*\),.*continuing on dp 2 x .*/\1 \2/p' "$out" | tail -1)
[ -n "$resumed" ] || { grep "^resume" "$out"; fail "no 'resume: ... continuing on dp 2' line"; }
ck=${resumed% *} k=${resumed#* }
echo "the survivors resumed from $ck (step $k), newest before the kill: $(echo "$before" | tail -1)"
[[ "$before" == *"$ck"* ]] || fail "resumed from $ck, which was not written before the kill"
grep -q "^batch: global 16 sequences = micro_batch 4 x accumulation 2 x dp 2" "$out" || fail "dp 2 did not keep the global batch of 16"
# the reference: a run started on dp 2 from that checkpoint (one node, mpirun)
$MPIRUN -np 2 ./llmtrain "${ARGS[@]}" parallel.dp=2 run.name=ref run.elastic="'off'" checkpoint.resume="'$ck'" \
    >"$RUNS/ref.log" 2>&1 || { tail "$RUNS/ref.log"; fail "the dp 2 reference run from $ck failed"; }
same_last_steps ref el $((STEPS - k)) "steps $((k + 1))-$STEPS after the restart differ from the dp 2 run from $ck"
echo "steps $((k + 1))-$STEPS on the survivors: loss, lr and gradient norm bit-identical to a dp 2 run from $ck"
echo "timings (shrink): job $((t_end - t0)) s, kill to the end of the job $((t_end - t_kill)) s"

# elastic = 'wait': node n4 dies mid-run; the job is requeued, waits for 4 nodes, and continues
# when the node is back (revive-node.sh) from the newest checkpoint, on the same grid: its steps
# after the resume are bit-identical to an uninterrupted dp 4 run
$CL/revive-node.sh 3 2>>"$TEST_DIR/up.log" || fail "node n3 did not come back"
t0=$(date +%s)
jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/wait-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}" run.name=wait run.elastic="'wait'") || fail "sbatch refused elastic.sbatch (wait)"
out=$RUNS/wait-$jid.out
wait_steps "$RUNS/wait/metrics.jsonl" 24 || { tail -20 "$out"; fail "wait: the run did not reach step 24"; }
$CL/kill-node.sh 4 2>>"$TEST_DIR/up.log"
for _ in $(seq 240); do grep -q "requeueing job $jid" "$out" 2>/dev/null && break; sleep 0.5; done
grep -q "lost node(s) n4 (ranks 3-3 of dp 4 x tp 1 x pp 1)" "$out" || { tail -20 "$out"; fail "wait: node n4 and its rank 3 not named"; }
grep -q "&run elastic = 'wait': requeueing job $jid" "$out" || { tail -20 "$out"; fail "wait: the job was not requeued"; }
# the requeued job waits: pending while n4 is down (Slurm marks it after SlurmdTimeout)
why=$(pending_on_down "$jid")
[ -n "$why" ] || { scontrol -o show job "$jid"; fail "wait: the requeued job is not pending on the down node"; }
echo "wait: n4 lost and named; job $jid requeued and waiting: $why"
$CL/revive-node.sh 4 2>>"$TEST_DIR/up.log" || fail "node n4 did not come back"
state=""
for _ in $(seq 480); do
    state=$(scontrol -o show job "$jid" 2>/dev/null | sed -n 's/.* JobState=\([^ ]*\).*/\1/p')
    restarts=$(scontrol -o show job "$jid" 2>/dev/null | sed -n 's/.* Restarts=\([0-9]*\).*/\1/p')
    [ "$state" = COMPLETED ] && break
    case "$state" in FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    sleep 0.5
done
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "wait: job $jid ended $state after the node came back"; }
resumed=$(sed -n 's/^resume: \([^:]*\): step \([0-9]*\),.*continuing on dp 4 x .*/\1 \2/p' "$out" | tail -1)
[ -n "$resumed" ] || { grep "^resume" "$out"; fail "wait: the requeued job did not resume on dp 4"; }
k=${resumed#* }
$MPIRUN -np 4 ./llmtrain "${ARGS[@]}" run.name=ref4 run.elastic="'off'" >"$RUNS/ref4.log" 2>&1 ||
    { tail "$RUNS/ref4.log"; fail "the uninterrupted dp 4 reference failed"; }
same_last_steps ref4 wait $((STEPS - k)) "wait: steps $((k + 1))-$STEPS differ from the uninterrupted dp 4 run"
echo "wait: job $jid restarted ($restarts requeue(s)) on 4 nodes from step $k: steps $((k + 1))-$STEPS bit-identical to an uninterrupted dp 4 run ($(( $(date +%s) - t0 )) s)"
