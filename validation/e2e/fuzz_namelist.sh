#!/usr/bin/env bash
# 60 s of libFuzzer on the namelist parser and the schema (validation/fuzz/fuzz_namelist.c,
# clang -fsanitize=fuzzer,address,undefined): fails on any crash, ASan/UBSan report, leak, hang
# (one input > 20 s) or broken promise (a message without path:line:col, an echo that does not
# read back). The input that did it is kept in build/fuzz/crashes/ and printed.
# Skipped (exit 77) where clang cannot build a libFuzzer program (Debian: clang libclang-rt-dev).
source "$(dirname "$0")/lib.bash"
seconds=${FUZZ_SECONDS:-60}
cc=${FUZZ_CC:-$(sed -n 's/^FUZZ_CC *= *//p' Makefile.inc)}
cc=${cc:-clang}
command -v "$cc" >/dev/null || { echo "SKIP: no $cc (make deps installs clang libclang-rt-dev)"; exit 77; }
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$TEST_DIR/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined -o "$TEST_DIR/probe" "$TEST_DIR/probe.c" >"$TEST_DIR/probe.log" 2>&1 ||
    { cat "$TEST_DIR/probe.log"; echo "SKIP: $cc cannot link a libFuzzer program (Debian: clang libclang-rt-dev)"; exit 77; }
make --no-print-directory FUZZ_CC="$cc" build/fuzz/fuzz_namelist >"$TEST_DIR/build.log" 2>&1 ||
    { cat "$TEST_DIR/build.log"; fail "the fuzz target does not build"; }
grep -E 'warning' "$TEST_DIR/build.log" && fail "the fuzz target builds with warnings"
# A fresh corpus (under $TEST_DIR) each time: the result depends on this run only, not on
# what earlier `make fuzz` runs collected in build/fuzz/corpus.
bash validation/fuzz/run_fuzz.sh "$seconds" "$TEST_DIR/corpus" || fail "the fuzzer found an input that breaks the parser (above)"
