# common.bash — shared by the tokenizer scenario tests (sourced after validation/e2e/lib.bash).
# Builds ./llmprep when it is missing or stale, and checks what validation/deps.sh installs:
# GPT-2's vocabulary (data/gpt2/gpt2.tiktoken) and tiktoken (.deps/python, on PYTHONPATH).
GPT2_VOCAB=data/gpt2/gpt2.tiktoken
CORPUS=validation/tokenizer/corpus
export PYTHONPATH=$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}
make --no-print-directory -s llmprep >"$TEST_DIR/make.log" 2>&1 || { cat "$TEST_DIR/make.log"; fail "make llmprep failed"; }
[ -f "$GPT2_VOCAB" ] || fail "$GPT2_VOCAB is missing: run 'make deps' (validation/deps.sh)"
$PYTHON -c "import tiktoken" 2>/dev/null || fail "tiktoken is not in .deps/python: run 'make deps'"

# prep NP OUT_DIR ARGS...: run llmprep on NP ranks; its output goes to OUT_DIR.log
prep() {
    local np=$1 out=$2; shift 2
    timeout 120 $MPIRUN -np "$np" ./llmprep --out "$out" "$@" >"$out.log" 2>&1 ||
        { cat "$out.log"; fail "llmprep -np $np $* (exit $?)"; }
}

# same_dirs A B: the same file names and byte-identical files
same_dirs() {
    local a=$1 b=$2 f
    [ "$(cd "$a" && ls)" = "$(cd "$b" && ls)" ] || { ls "$a" "$b"; fail "$a and $b hold different files"; }
    for f in "$a"/*; do
        cmp "$f" "$b/$(basename "$f")" || fail "$f differs from $b/$(basename "$f")"
    done
}
