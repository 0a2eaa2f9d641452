#!/usr/bin/env bash
# config_fuzz: the configuration-space invariant fuzzer (validation/fuzz/config_fuzz.py) on its
# FIXED pairwise covering set (every pair of values of the main features - arch, dense/MoE
# routing, dp/tp/pp/ep, schedule, ZeRO stage, recompute, precision, bf16 products native or
# not, 16-bit storage, dropout, label smoothing, accumulation, &stage, validation, anomaly
# policy, offload, stop kind - in at least one row, built deterministically) and the corpus validation/fuzz/config_corpus/*.nml
# (entries listed in KNOWN_FAILING are skipped with their reason). Each row: I1 the same losses,
# gradient norms and validation losses as the 1-rank run (fp32 rel 1e-5, bf16 2e-2, fp16 1e-2),
# I2 a resume (from a checkpoint path, or after SIGUSR1 with resume = 'auto') bit-identical to
# the uninterrupted run, I3 every run ends (timeout, watchdog 30 s) with exit 0 / 75, I4 eval of
# the final weights = the last logged validation loss (6 decimals), I5 generate on the final
# weights prints max_new_tokens ids in the vocabulary (pp = 1) or is refused with one message
# naming &parallel pp (pp > 1; or, drawn, generates on dp x tp with pp = 1 from those weights);
# a bf16 run's startup names the products bf16_products asked for.
# Fails on any failure or on a draw the binary refuses (a fuzzer bug: the covering set must be
# valid). The last line gives the time (budget: 8 minutes on 2 cores).
source "$(dirname "$0")/lib.bash"
$PYTHON validation/fuzz/config_fuzz.py --covering --work "$TEST_DIR" --bin ./llmtrain
rc=$?
[ $rc -eq 0 ] || fail "config_fuzz exited $rc (1: an invariant failed; 3: a draw was refused)"
