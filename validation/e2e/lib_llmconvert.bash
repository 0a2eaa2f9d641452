# lib_llmconvert.bash — bad-input helpers of the llmconvert scenario tests (llmconvert_gpt2.sh,
# llmconvert_llama.sh; sourced after lib.bash, with D the test's directory).
#   refused NAME WORD ARGS...   ./llmconvert ARGS exits 2 with one stderr line containing WORD
#   bad_hf NAME PYTHON-EXPR     $D/NAME: a copy of the random model $D/hf whose config.json is
#                               changed by EXPR (on the dict c)
refused() {
    local name=$1 word=$2 rc; shift 2
    ./llmconvert "$@" >"$D/$name.out" 2>"$D/$name.err"; rc=$?
    [ $rc -eq 2 ] || { cat "$D/$name.err"; fail "$name: exit $rc, expected 2"; }
    [ "$(wc -l <"$D/$name.err")" -eq 1 ] || { cat "$D/$name.err"; fail "$name: not one line"; }
    grep -qF -- "$word" "$D/$name.err" || { cat "$D/$name.err"; fail "$name: message does not name $word"; }
    echo "$name: $(cat "$D/$name.err")"
}
bad_hf() {
    cp -r "$D/hf" "$D/$1"
    $PYTHON -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); $2; json.dump(c, open(p, 'w'))" "$D/$1/config.json"
}
