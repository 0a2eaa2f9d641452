#!/usr/bin/env bash
# The programs under AddressSanitizer + UndefinedBehaviorSanitizer (make SANITIZE=1, built into
# build-asan/, never mixed with build/): the tiny model trains 10 steps on 1 rank and on 4 ranks
# (dp 2 x pp 2: 1F1B pipeline p2p, dp all-reduce, collective HDF5 checkpoints), resumes on
# tp 2 x pp 2 (checkpoint reading, tensor-parallel all-reduces), evaluates and generates on
# 1 rank, trains with the optimizer offloaded, behind the simulated device (dp 2) and with bf16
# activations in 16-bit storage (pp 2, ZB-H1), llmprep trains a small BPE vocabulary on 2 ranks,
# and the unit tests run (all but test_tokenizer: 2 minutes under ASan). Fails on any ASan or UBSan report in any output, or a
# run that does not finish.
source "$(dirname "$0")/lib.bash"
t0=$(date +%s)
make --no-print-directory -j2 SANITIZE=1 all tests >"$TEST_DIR/build.log" 2>&1 ||
    { tail -30 "$TEST_DIR/build.log"; fail "make SANITIZE=1 failed"; }
echo "sanitizer build (make SANITIZE=1): $(($(date +%s) - t0)) s"

# detect_leaks=0: LeakSanitizer reports ~3300 blocks (117 KB) that OpenMPI, its plugins, hwloc
#   and OpenBLAS allocate once and never free; their stacks end in plugins built without frame
#   pointers ("<unknown module>"), so no suppressions file can name them. Leaks in our parser
#   are caught by validation/e2e/fuzz_namelist.sh, which runs with leak detection on.
# abort_on_error=0 (the default, said here): a report ends the rank with exit 1, so mpirun ends
#   the job instead of waiting for a core dump.
# UBSAN_OPTIONS halt_on_error=1: gcc's UBSan prints a report and carries on by default, so a run
#   could finish "fine"; stop at the first one. print_stacktrace=1: say who called it.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
BIN=build-asan

reports() { # the sanitizer lines of the logs given, if any
    grep -HE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$@"
}
run() { # NAME NP PROGRAM ARGS...: one run; fails on a non-zero exit or any report
    local name=$1 np=$2 t rc
    t=$(date +%s)
    shift 2
    timeout 300 $MPIRUN -np "$np" "$@" >"$TEST_DIR/$name.log" 2>&1
    rc=$?
    if reports "$TEST_DIR/$name.log" >/dev/null; then
        grep -E -A25 'ERROR: AddressSanitizer|runtime error:' "$TEST_DIR/$name.log" | head -60
        fail "$name: sanitizer report (above; full log $TEST_DIR/$name.log)"
    fi
    [ $rc -eq 0 ] || { tail -20 "$TEST_DIR/$name.log"; fail "$name: exit $rc"; }
    echo "ok  $name on $np rank(s): $(($(date +%s) - t)) s, no report"
}
nml() { # NAME dp pp tp [resume] : the tiny model, 10 steps, checkpoints at 5 and 10
    write_tiny_nml "$TEST_DIR/$1.nml" name="$1" max_steps=10 val_every=5 dp="$2" gb=16
    sed -i "s/^  dp = $2\$/  dp = $2, pp = $3, tp = $4/" "$TEST_DIR/$1.nml"
    printf "&checkpoint\n  every = 5, keep = 2, resume = '%s'\n/\n" "${5:-none}" >>"$TEST_DIR/$1.nml"
}

nml one 1 1 1
run one 1 $BIN/llmtrain "$TEST_DIR/one.nml"
nml four 2 2 1
run four 4 $BIN/llmtrain "$TEST_DIR/four.nml"
grep -q '^pipeline: schedule 1f1b' "$TEST_DIR/four.log" || fail "four: did not run the pipeline"
[ "$(losses "$TEST_DIR/four/metrics.jsonl" | wc -l)" -eq 10 ] || fail "four: expected 10 loss lines"
nml resumed 1 2 2 "$TEST_DIR/four/ckpt_step00000005.h5"
run resumed 4 $BIN/llmtrain "$TEST_DIR/resumed.nml"
grep -q '^resume: .*step 5' "$TEST_DIR/resumed.log" || fail "resumed: did not resume from step 5"
w=$TEST_DIR/four/weights_step000010.h5
write_tiny_nml "$TEST_DIR/eval.nml" name=eval mode=eval init_from="$w"
run eval 1 $BIN/llmtrain "$TEST_DIR/eval.nml"
write_tiny_nml "$TEST_DIR/gen.nml" name=gen mode=generate init_from="$w" \
    extra_run="prompt_ids = 10, 20, 30, max_new_tokens = 8, temperature = 0.8, top_k = 20"
run generate 1 $BIN/llmtrain "$TEST_DIR/gen.nml"
# the offloaded optimizer's thread beside the forward (dp 2), and the simulated device with the
# staged transport under ZeRO-3 (LLMT_DEVSIM: mprotect'ed arena, its own SIGSEGV handler)
nml offload 2 1 1
run offload 2 $BIN/llmtrain "$TEST_DIR/offload.nml" train.offload="'optimizer'"
grep -q "^optimizer: offload = 'optimizer'" "$TEST_DIR/offload.log" || fail "offload: not offloaded"
nml devsim 2 1 1
LLMT_DEVSIM=1 run devsim 2 $BIN/llmtrain "$TEST_DIR/devsim.nml" parallel.zero_stage=3
# bf16 with the saved activations in 16-bit storage on ZB-H1 (pp 2: each block packed after its
# forward and unpacked before its backward, W unpacking its inputs; the evaluations' forwards)
nml act16 1 2 1
run act16 2 $BIN/llmtrain "$TEST_DIR/act16.nml" train.precision="'bf16'" \
    train.activations_storage="'16bit'" parallel.schedule="'zb-h1'"
grep -q '^activations: bf16 storage' "$TEST_DIR/act16.log" || fail "act16: not in 16-bit storage"
grep -q '^compute: cpu-devsim backend' "$TEST_DIR/devsim.log" || fail "devsim: the simulated device was not used"
run llmprep 2 $BIN/llmprep --out "$TEST_DIR/prep" --train-vocab 300 --val-fraction 0.1 \
    --shard-tokens 5000 $(ls /usr/share/common-licenses/* | head -3)
for t in "$BIN"/tests/test_*; do
    case $t in *.d | */test_tokenizer) continue ;; esac
    run "$(basename "$t")" 1 "$t"
done
echo "sanitizers: build and all runs in $(($(date +%s) - t0)) s, no ASan or UBSan report"
