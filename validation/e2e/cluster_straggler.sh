#!/usr/bin/env bash
# A slow link between nodes, named (parallel/linkprobe.h, &log link_probe_every): on the emulated
# cluster (validation/cluster/up.sh, 4 nodes, one rank each: multi_node_dp.sbatch with dp 4) a
# healthy run probes the links every 2 steps and names nobody; then node n3's link is slowed
# with tc's token-bucket filter (tbf: 40 Mbit/s out of its namespace; this kernel has no netem)
# and the same job names n3 — the step line's "slow link n3", the warning, and the step records'
# straggler_link_host — at the second probe after the slowdown (step 4), never another node.
# The busy-time straggler check names no rank in either run: a slow link slows every rank alike.
# Skipped, with the reason, where namespaces cannot be made.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
source "$(dirname "$0")/lib_cluster.bash"
cluster_start llmstrag 4
RUNS=$PWD/$TEST_DIR
COMMON=(inputs/tiny.nml parallel.dp=4 train.global_batch=16 train.max_steps=8 data.val_every=0
        log.every=1 checkpoint.every=0 log.link_probe_every=2 log.link_probe_kib=256
        run.out_dir="'$RUNS'")

# run NAME: multi_node_dp.sbatch on 4 nodes (one rank each) into run directory NAME; waits
run() {
    local jid state
    jid=$(sbatch --parsable --nodes=4 --ntasks-per-node=1 --output="$RUNS/$1.out" \
          jobscripts/multi_node_dp.sbatch "${COMMON[@]}" run.name="$1") || fail "sbatch refused"
    state=$(slurm_wait_gone "$jid" 240)
    [ "$state" = COMPLETED ] || { tail -30 "$RUNS/$1.out"; fail "$1: job $jid ended $state"; }
}

run healthy
grep -q '^links: 4 probes of 256 KiB between 4 nodes, 0 slow nodes named' "$RUNS/healthy.out" ||
    { grep -E '^links|slow link|warning' "$RUNS/healthy.out"; fail "healthy: the end-of-run line does not say 4 probes, none named"; }
! grep -q 'straggler_link_host\|"straggler_rank"' "$RUNS/healthy/metrics.jsonl" ||
    fail "healthy: a straggler was named: $(grep -o '"straggler[a-z_]*":[^,]*' "$RUNS/healthy/metrics.jsonl" | sort | uniq -c)"
echo "healthy: $(grep '^links:' "$RUNS/healthy.out")"

ns=${LLMT_CLUSTER}-n3 # validation/cluster/common.bash names node K's namespace so
tc -n "$ns" qdisc add dev eth0 root tbf rate 40mbit burst 32kbit latency 500ms ||
    fail "tc tbf on $ns's eth0 failed"
run slowlink
tc -n "$ns" qdisc del dev eth0 root 2>/dev/null
named=$(grep -o '"step":[0-9]*\|"straggler_link_host":"[^"]*"' "$RUNS/slowlink/metrics.jsonl" |
        awk -F: '/step/ {s = $2} /straggler_link_host/ {gsub(/"/, "", $2); print s, $2}')
[ -n "$named" ] || { grep -E '^links|warning' "$RUNS/slowlink.out"; fail "slowlink: nobody named"; }
first=$(echo "$named" | head -1)
[ "$first" = "4 n3" ] || fail "slowlink: first named '$first', expected '4 n3' (step, host)"
[ "$(echo "$named" | awk '{print $2}' | sort -u)" = n3 ] || fail "slowlink: named others too: $named"
grep -q 'warning: step 4: node n3 (its first rank 2) is on a slow link' "$RUNS/slowlink.out" ||
    fail "slowlink: no warning naming n3"
grep -q '| slow link n3 x' "$RUNS/slowlink.out" || fail "slowlink: the step line has no 'slow link n3'"
! grep -q '"straggler_rank"' "$RUNS/slowlink/metrics.jsonl" ||
    fail "slowlink: the busy-time check named a rank (a slow link slows all ranks alike)"
echo "slowlink: named at steps $(echo "$named" | awk '{print $1}' | tr '\n' ' ')— $(grep -o 'warning: step 4: .*' "$RUNS/slowlink.out" | cut -c1-200)"
echo "slowlink: $(grep '^links:' "$RUNS/slowlink.out")"
