#!/usr/bin/env bash
# A node cut off mid-run on the emulated cluster (validation/cluster/up.sh 4, kill-node.sh --link 3:
# the bridge side of node n3's veth pair set down, as a pulled cable): unlike a killed node its
# processes live on, and nobody gets an error, only silence (no reset, no refused connection).
# Under jobscripts/elastic.sbatch with &run elastic = 'shrink', min_nodes = 2: dp 4, one rank per
# node, global batch 16, a checkpoint every 10 steps, steps slowed to >= 60 ms (LLMT_FAULT step
# sleep) so the cut lands mid-run. Checks: the job never hangs: the ranks' watchdog
# (&checkpoint timeout_s = io_timeout_s = 10) ends the step with its exit code (4) and the job
# names the lost node n3 and its rank 2 within the watchdog bound plus the probe; no checkpoint
# written before the cut is lost or changed; the job continues on 2 of the 3 nodes that answer
# (dp 2, accumulation 2) from the newest checkpoint and completes, its steps after the restart
# bit-identical to a run started on dp 2 from that checkpoint (mpirun on one node); n3's own
# rank ended by itself (only its slurmd is left). Then revive-node.sh 3 sets the link up again,
# and a job with &run elastic = 'off' runs on all 4 nodes (n3 among them) until node n4's link is
# cut: it ends FAILED with exit code 4 within the bound, naming n4 and its rank 3. Skipped, with
# the reason, where namespaces cannot be made. Everything the cluster started is stopped on exit.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
source "$(dirname "$0")/lib_cluster.bash"
cluster_start llmtcut 4
export LLMT_PROBE_S=8
RUNS=$PWD/$TEST_DIR
elastic_dp4_args cut
t0=$(date +%s)
jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/cut-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}") || fail "sbatch refused elastic.sbatch"
out=$RUNS/cut-$jid.out
wait_steps "$RUNS/cut/metrics.jsonl" 24
[ -f "$RUNS/cut/ckpt_step00000020.h5" ] || { tail -20 "$out"; fail "the run did not reach step 24 with a step-20 checkpoint"; }
$CL/kill-node.sh --link 3 2>>"$TEST_DIR/up.log" || fail "kill-node.sh --link 3 failed"
t_cut=$(date +%s)
before=$(ls "$RUNS/cut"/ckpt_step*.h5 | sort)
sha_before=$(sha256sum $before)
watch_job "$jid" "$out"
[ "$state" = COMPLETED ] || { tail -40 "$out"; fail "the elastic job $jid ended $state after the cut (expected COMPLETED on the survivors)"; }
grep "^llmtrain job:" "$out"
grep "watchdog" "$out" | head -4
grep -q "lost node(s) n3 (ranks 2-2 of dp 4 x tp 1 x pp 1): llmtrain exited with 4;" "$out" ||
    fail "the job output does not name node n3 and its rank 2 with llmtrain's watchdog exit code 4"
grep -q "llmtrain: watchdog: rank [0-9] waited .* a peer is dead or hung" "$out" || fail "no watchdog message: who ended the step?"
named=$((t_named - t_cut))
[ "$named" -le 50 ] || fail "the lost node was named $named s after the cut (bound: watchdog 10 s + probe 8 s + 30 s)"
echo "node n3 cut off; named with its rank $named s later (watchdog 10 s, probe <= 8 s)"
grep -q "continuing on 2 node(s) n1 n2 from the newest checkpoint: dp 4 -> 2" "$out" ||
    { tail -30 "$out"; fail "the job did not continue on n1 n2 with dp 2"; }
for f in $before; do [ -f "$f" ] || fail "checkpoint $f written before the cut is gone"; done
[ "$(sha256sum $before)" = "$sha_before" ] || fail "a checkpoint written before the cut changed"
resumed=$(sed -n 's/^resume: \([^:]*\): step \([0-9]*\),.*continuing on dp 2 x .*/\1 \2/p' "$out" | tail -1)
[ -n "$resumed" ] || { grep "^resume" "$out"; fail "no 'resume: ... continuing on dp 2' line"; }
ck=${resumed% *} k=${resumed#* }
echo "the survivors resumed from $ck (step $k), newest before the cut: $(echo "$before" | tail -1)"
[ "$ck" = "$(echo "$before" | tail -1)" ] || fail "resumed from $ck, not the newest checkpoint written before the cut"
grep -q "^batch: global 16 sequences = micro_batch 4 x accumulation 2 x dp 2" "$out" || fail "dp 2 did not keep the global batch of 16"
$MPIRUN -np 2 ./llmtrain "${ARGS[@]}" parallel.dp=2 run.name=ref run.elastic="'off'" checkpoint.resume="'$ck'" \
    >"$RUNS/ref.log" 2>&1 || { tail "$RUNS/ref.log"; fail "the dp 2 reference run from $ck failed"; }
same_last_steps ref cut $((STEPS - k)) "steps $((k + 1))-$STEPS after the restart differ from the dp 2 run from $ck"
echo "steps $((k + 1))-$STEPS on the survivors: loss, lr and gradient norm bit-identical to a dp 2 run from $ck"
# the cut-off node's own rank ended too (its watchdog: nobody could tell it); Slurm's slurmstepd
# may still be there, trying to report to the controller it cannot reach
left=""
for _ in $(seq 60); do
    left=$(for p in $(ip netns pids "$LLMT_CLUSTER-n3"); do cat "/proc/$p/comm" 2>/dev/null; done | grep -x llmtrain | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 0.5
done
[ "$left" -eq 0 ] || fail "$left llmtrain rank(s) still run on the cut-off node n3"
echo "n3, cut off: its rank ended by itself (no llmtrain left in its namespace)"
t_rev=$(date +%s)
$CL/revive-node.sh 3 2>>"$TEST_DIR/up.log" || { tail -3 "$TEST_DIR/up.log"; fail "n3 did not come back after its link was set up again"; }
echo "revive-node.sh 3: link up, n3 $(sinfo -h -n n3 -o %T) after $(( $(date +%s) - t_rev )) s"
echo "timings (shrink): job $((t_end - t0)) s, cut to the end of the job $((t_end - t_cut)) s"

# elastic = 'off' on all 4 nodes, n3 back among them: node n4's link is cut mid-run; the job ends
# (FAILED) with llmtrain's watchdog exit code 4, naming n4 and its rank 3, within the bound
t0=$(date +%s)
jid=$(LLMT_FAULT=step@0:sleep60 sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/off-%j.out" \
      jobscripts/elastic.sbatch "${ARGS[@]}" run.name=off run.elastic="'off'") || fail "sbatch refused elastic.sbatch (off)"
out=$RUNS/off-$jid.out
wait_steps "$RUNS/off/metrics.jsonl" 12 || { tail -20 "$out"; fail "off: the run did not reach step 12"; }
grep -q '"rank_hosts":\["n1","n2","n3","n4"\]' "$RUNS/off/metrics.jsonl" || fail "off: the job did not run on n1..n4 (n3 revived)"
$CL/kill-node.sh --link 4 2>>"$TEST_DIR/up.log" || fail "kill-node.sh --link 4 failed"
t_cut=$(date +%s)
watch_job "$jid" "$out"
[ "$state" = FAILED ] || { tail -20 "$out"; fail "off: job $jid ended $state after n4's link was cut (expected FAILED)"; }
code=$(scontrol -o show job "$jid" | sed -n 's/.* ExitCode=\([^ ]*\).*/\1/p')
[ "$code" = 4:0 ] || fail "off: job $jid ended with ExitCode=$code, expected 4:0 (llmtrain's watchdog)"
grep -q "lost node(s) n4 (ranks 3-3 of dp 4 x tp 1 x pp 1): llmtrain exited with 4;" "$out" &&
    grep -q "&run elastic = 'off': the job ends" "$out" || { tail -20 "$out"; fail "off: n4 and its rank 3 not named, or the job did not end"; }
[ $((t_named - t_cut)) -le 50 ] || fail "off: n4 was named $((t_named - t_cut)) s after the cut (bound: watchdog 10 s + probe 8 s + 30 s)"
echo "off: n4 cut off at step $(grep -c '"step"' "$RUNS/off/metrics.jsonl"); named with rank 3 $((t_named - t_cut)) s after the cut; job $jid FAILED, ExitCode $code, out of the queue $((t_end - t_cut)) s after the cut (Slurm waits for n4 to be declared DOWN)"
echo "timings (off): job $((t_end - t0)) s"
