#!/usr/bin/env bash
# Mixture of experts trains the same on every grid as on one process: the tiny MoE model of
# lib_moe.bash (4 experts, top-2, capacity factor 1.0: some assignments are dropped, and which
# ones must not depend on the grid), same seed and global batch (8 sequences, micro-batch 2),
# 6 steps on 11 grids of 2 or 4 ranks — dp without expert parallelism, ep 2 and 4, tp and pp
# with ep (1F1B and ZB-H1), ZeRO 1/2/3 over the experts' replicas, tp x pp. Every step's
# cross-entropy loss (rel. 1e-6), gradient norm before clipping (rel. 1e-5), moe_aux_loss and
# moe_z_loss (rel. 1e-6) and each MoE layer's expert loads moe<L>_load (exactly) equal the
# serial run's; the grids differ only in the order of fp32 sums.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash"
t0=$(date +%s.%N)
moe_nml
run_moe serial 1
[ "$(step_records "$TEST_DIR/serial/metrics.jsonl" 1 | wc -l)" -eq 6 ] || fail "serial: not 6 step records"
grep -q '"moe_dropped":0\.[0-9]*[1-9]' "$TEST_DIR/serial/metrics.jsonl" ||
    fail "serial: no assignment dropped at capacity factor 1.0 (the drops are part of what is compared)"
moe_header
# name np overrides...
while read -r name np keys; do
    # shellcheck disable=SC2086  # keys: blank-separated overrides
    run_moe "$name" "$np" $keys
    moe_compare serial "$name"
    # expert parallelism really ran: rank 0 sent tokens through the all-to-all
    case $keys in *ep=[24]*) scalar "$TEST_DIR/$name/metrics.jsonl" 1 bytes_ep | grep -qv '^0$' ||
        fail "$name: bytes_ep is 0 in every step: no all-to-all"; ;; esac
done <<'GRIDS'
dp2_ep1             2 parallel.dp=2
dp2_ep2             2 parallel.dp=2 parallel.ep=2
dp4_ep4             4 parallel.dp=4 parallel.ep=4
dp4_ep2             4 parallel.dp=4 parallel.ep=2
tp2_dp2_ep2         4 parallel.tp=2 parallel.dp=2 parallel.ep=2
pp2_dp2_ep2_1f1b    4 parallel.pp=2 parallel.dp=2 parallel.ep=2 parallel.schedule=1f1b
pp2_dp2_ep2_zbh1    4 parallel.pp=2 parallel.dp=2 parallel.ep=2 parallel.schedule=zb-h1
dp4_ep2_zero1       4 parallel.dp=4 parallel.ep=2 parallel.zero_stage=1
dp4_ep2_zero2       4 parallel.dp=4 parallel.ep=2 parallel.zero_stage=2
dp4_ep2_zero3       4 parallel.dp=4 parallel.ep=2 parallel.zero_stage=3
tp2_pp2             4 parallel.tp=2 parallel.pp=2
GRIDS
echo "PASS ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s)"
