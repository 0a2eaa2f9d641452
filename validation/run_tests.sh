#!/usr/bin/env bash
# run_tests.sh — the whole test suite, as `make check` runs it.
# Runs every unit-test program (each cmocka case counts as one test) and every scenario script in
# validation/e2e/ (each script counts as one test; it exits 0 on success and prints the numbers
# that differ on failure, or exits 77 after printing why it is skipped, e.g. a missing compiler).
# The last line is "N passed, N failed". With --unit, the unit-test programs alone.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export MPIRUN=${MPIRUN:-"mpirun --oversubscribe"} PYTHON=${PYTHON:-/usr/bin/python3}
LOG_DIR=build/test-logs
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"
pass=0 fail=0
failed=() skipped=()

run_unit() { # one cmocka program: count its cases
    local bin=$1 name log rc ok bad
    name=$(basename "$bin")
    log="$LOG_DIR/$name.log"
    timeout 600 "$bin" >"$log" 2>&1
    rc=$?
    ok=$(grep -c '^\[       OK \]' "$log")
    bad=$(grep '^\[  FAILED  \]' "$log" | grep -vc 'test(s)')
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi # crashed or timed out
    pass=$((pass + ok)) fail=$((fail + bad))
    printf '%-44s %3d passed, %d failed\n' "$name" "$ok" "$bad"
    if [ "$bad" -ne 0 ]; then failed+=("$name (see $log)"); grep -E 'FAILED|error|Error' "$log" | head -20; fi
}

run_scenario() { # one script in validation/e2e: one test
    local script=$1 name log rc t0 t1
    name=$(basename "$script" .sh)
    log="$LOG_DIR/$name.log"
    t0=$(date +%s)
    timeout 900 bash "$script" >"$log" 2>&1
    rc=$?
    t1=$(date +%s)
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1)); printf '%-44s PASS (%ds)\n' "$name" $((t1 - t0))
    elif [ "$rc" -eq 77 ]; then # neither passed nor failed: the reason is its last line
        skipped+=("$name: $(tail -1 "$log")"); printf '%-44s SKIP (%s)\n' "$name" "$(tail -1 "$log")"
    else
        fail=$((fail + 1)); failed+=("$name (see $log)")
        printf '%-44s FAIL (exit %d, %ds)\n' "$name" "$rc" $((t1 - t0)); tail -25 "$log"
    fi
}

echo "== unit tests"
for bin in build/tests/test_*; do
    case "$bin" in *.d) continue ;; esac
    [ -x "$bin" ] && run_unit "$bin"
done
if [ "${1:-}" != "--unit" ]; then # --unit: the unit tests alone (make check-unit)
    echo "== scenario and reference tests"
    for script in validation/e2e/*.sh; do
        [ -f "$script" ] && run_scenario "$script"
    done
fi
if [ ${#skipped[@]} -gt 0 ]; then
    echo "${#skipped[@]} skipped (neither passed nor failed; each says why):"
    printf '  %s\n' "${skipped[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed:"
    printf '  %s\n' "${failed[@]}"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
