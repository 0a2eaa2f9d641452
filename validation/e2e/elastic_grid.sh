#!/usr/bin/env bash
# The grid elastic.sbatch continues on after a lost node (jobscripts/llmtrain_job.bash
# llmt_shrink_grid, no Slurm needed): the most nodes (>= &run min_nodes) whose ranks hold whole
# tp x pp groups and whose dp llmtrain accepts for the global batch; none: one message naming
# min_nodes and the node count, exit 2. And `llmtrain --grid` reports the policy; a bad policy is
# refused naming the key. (The node failure itself: cluster_elastic.sh.)
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
source jobscripts/llmtrain_job.bash
LLMT_BIN=./llmtrain LLMT_TMP=$TEST_DIR LLMT_RUN_DIR=runs/x LLMT_POOL_ALL=(n1 n2 n3 n4)
NML=(inputs/tiny.nml train.global_batch=16)

# shrink N PER_NODE TP PP DP_FULL MIN: prints "nodes dp ranks" or the refusal (exit 2)
shrink() {
    (LLMT_PER_NODE=$2 LLMT_TP=$3 LLMT_PP=$4 LLMT_DP_FULL=$5 LLMT_MIN_NODES=$6
     llmt_shrink_grid "$1" "${NML[@]}" parallel.tp="$3" parallel.pp="$4" model.n_layer=4 && echo "$LLMT_NODES $LLMT_DP $LLMT_RANKS")
}
got=$(shrink 3 1 1 1 4 2) || fail "dp 4 on 3 survivors: refused: $got"
[ "$got" = "2 2 2" ] || fail "dp 4, 1 rank per node, 3 survivors: got nodes/dp/ranks '$got', expected 2 2 2 (dp 3 cannot hold 16 sequences of micro-batch 4)"
echo "dp 4 (1 rank per node), 3 nodes left, min_nodes 2: continues on 2 nodes, dp 2"
got=$(shrink 3 2 2 2 2 1) || fail "tp 2 x pp 2 x dp 2 on 3 survivors: refused: $got"
[ "$got" = "2 1 4" ] || fail "tp 2 x pp 2, 2 ranks per node, 3 survivors: got '$got', expected 2 1 4 (6 ranks hold no whole 4-rank groups)"
echo "dp 2 x tp 2 x pp 2 (2 ranks per node), 3 nodes left: continues on 2 nodes, dp 1 (3 nodes x 2 ranks hold no whole tp x pp group)"
got=$(shrink 4 1 1 1 4 1) && [ "$got" = "4 4 4" ] || fail "all 4 nodes left: got '$got', expected the full grid 4 4 4"
# refusals: one message naming min_nodes and the node count, exit 2
out=$(shrink 3 1 1 1 4 3 2>&1); rc=$?
[ $rc -eq 2 ] || fail "min_nodes 3 with 3 survivors and no dp 3: exit $rc (expected 2): $out"
echo "$out" | grep -q "error: &run min_nodes = 3: 3 node(s) left of the job's 4, and no grid of 3..3 nodes" ||
    fail "the min_nodes refusal does not name the key and the node count: $out"
echo "$out" | grep -q "untouched" || fail "the refusal does not say the checkpoints are untouched: $out"
echo "$out" | grep -q "must be a multiple of micro_batch \* dp" || fail "the refusal does not say why 3 nodes do not fit: $out"
echo "refused (exit 2): ${out#*error: }"
out=$(shrink 1 1 1 1 4 2 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "&run min_nodes = 2: 1 node(s) left" || fail "1 survivor below min_nodes 2: exit $rc: $out"
echo "1 node left, min_nodes 2: refused (exit 2)"
# the policy through --grid
line=$(./llmtrain --grid inputs/tiny.nml run.elastic="'shrink'" run.min_nodes=3) || fail "--grid with elastic failed"
[[ "$line" == *"LLMT_ELASTIC=shrink LLMT_MIN_NODES=3 "* ]] || fail "--grid does not print the policy: $line"
out=$(./llmtrain --grid inputs/tiny.nml run.elastic="'grow'" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "elastic" || fail "elastic = 'grow' not refused naming the key (exit $rc): $out"
out=$(./llmtrain --grid inputs/tiny.nml run.min_nodes=0 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "min_nodes" || fail "min_nodes = 0 not refused naming the key (exit $rc): $out"
echo "--grid prints LLMT_ELASTIC and LLMT_MIN_NODES; elastic = 'grow' and min_nodes = 0 refused naming the key"
