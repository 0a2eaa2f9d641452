#!/usr/bin/env bash
# run_fuzz.sh SECONDS [CORPUS_DIR] — run the namelist fuzz target (build/fuzz/fuzz_namelist, built
# by `make build/fuzz/fuzz_namelist`) for SECONDS and print one result line. Used by `make fuzz`
# and validation/e2e/fuzz_namelist.sh.
#   CORPUS_DIR  where new interesting inputs go (default build/fuzz/corpus, kept between runs);
#               seeded from validation/fuzz/corpus/ and inputs/*.nml (read only).
# Exit 0: no crash, sanitizer report, leak, hang (one input running > 20 s; the slowest
# legitimate one, a million values, takes about 1 s) or broken promise (see fuzz_namelist.c).
# Exit 1: the input that did it is kept in build/fuzz/crashes/ and printed, with the report and
# the command that reproduces it.
set -u
cd "$(dirname "$0")/../.."
seconds=${1:-300}
corpus=${2:-build/fuzz/corpus}
bin=${FUZZ_BIN:-build/fuzz/fuzz_namelist}
crashes=build/fuzz/crashes
log=$(dirname "$corpus")/fuzz.log # next to the corpus: make fuzz and the test never share one
[ -x "$bin" ] || { echo "fuzz: $bin is not built (make $bin)"; exit 1; }
mkdir -p "$corpus" "$crashes"

# detect_leaks=1: a parse that leaks is a finding (MPI is never initialized here, so OpenMPI
#   has nothing to leak). UBSan is compiled with -fno-sanitize-recover, so every report stops
#   the run; halt_on_error/print_stacktrace say so for a binary built some other way.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# -close_fd_mask=2: fatal_user prints every rejected input on stderr; libFuzzer moves its own and
#   the sanitizers' output to a copy of stderr first, so reports still appear. -timeout=20: one
#   input that takes 20 s is a hang. Exit codes 1: libFuzzer's default 77 would read as "skipped".
# Seeds after the working corpus: libFuzzer adds new inputs to the first folder only.
"$bin" -max_total_time="$seconds" -max_len=8192 -timeout=20 -rss_limit_mb=2048 \
    -close_fd_mask=2 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -dict=validation/fuzz/namelist.dict -artifact_prefix="$crashes/" \
    "$corpus" validation/fuzz/corpus inputs >"$log" 2>&1
rc=$?

edges=$(sed -n 's/.*Loaded [0-9]* modules *(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -1)
last=$(grep -E '^#[0-9]+' "$log" | tail -1)
cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/\1 \2 \3/p' <<<"$last")
read -r cov ft corp <<<"${cov:-? ? ?}"
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
if [ "$rc" -eq 0 ]; then
    echo "fuzz: ${runs:-?} inputs in ${seconds} s (${rate:-?}/s), coverage ${cov} of ${edges:-?} edges" \
         "(${ft} features), corpus ${corp} inputs in $corpus: no crash, leak, hang or broken promise"
    exit 0
fi
echo "fuzz: FAILED after ${runs:-?} inputs (exit $rc); the report (full log: $log):"
grep -E -A30 '==ERROR|runtime error|broken promise|ALARM|out-of-memory|deadly signal' "$log" |
    grep -v ' in fuzzer::' | head -40
unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
if [ -n "$unit" ] && [ -f "$unit" ]; then
    echo "fuzz: the input, $(wc -c <"$unit") bytes, kept as $unit (non-printing bytes as ^X / M-x):"
    echo "-----"
    head -c 4000 "$unit" | cat -v
    echo
    echo "-----"
    echo "fuzz: reproduce with: $bin $unit"
fi
exit 1
