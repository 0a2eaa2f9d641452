#!/usr/bin/env bash
# mode = 'generate' with a text prompt and &data tokenizer (the GPT-2 vocabulary): the prompt is
# encoded (to GPT-2's known ids), the continuation decoded; the printed text starts with the prompt, has the requested
# number of new ids, and is the same twice (temperature 0.8, top_k 40, seeded draws). A text
# prompt without a tokenizer is refused with exit 2.
source "$(dirname "$0")/lib.bash"
vocab=data/gpt2/gpt2.tiktoken
[ -f $vocab ] || fail "$vocab missing (make deps fetches it)"
gen() { # name [tokenizer]
    cat >$TEST_DIR/$1.nml <<NML
&run name = '$1', out_dir = '$TEST_DIR', mode = 'generate', seed = 11
     prompt = 'Hello, world! The meaning of life is', max_new_tokens = 10, temperature = 0.8, top_k = 40 /
&model n_layer = 2, n_head = 4, d_model = 64, vocab_size = 50257, seq_len = 32 /
&data tokenizer = '${2-$vocab}' /
NML
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1
}
gen a || { cat $TEST_DIR/a.log; fail "generate failed"; }
gen b || fail "generate failed"
sed -n '/^generate: text:/,$p' $TEST_DIR/a.log
ids=$(grep '^generate: prompt' $TEST_DIR/a.log)
echo "$ids"
# GPT-2's ids for this text (as tiktoken's "gpt2" encoding gives them)
[ "$ids" = "generate: prompt (9 ids): 15496 11 995 0 383 3616 286 1204 318" ] ||
    fail "the prompt does not encode to GPT-2's ids: $ids"
sed -n '/^generate: text:/{n;p}' $TEST_DIR/a.log | grep -q '^Hello, world! The meaning of life is' || fail "decoded text does not start with the prompt"
n=$(grep '^generate: continuation' $TEST_DIR/a.log | awk '{print NF - 2}')
[ "$n" -eq 10 ] || fail "expected 10 new ids, got $n"
cmp <(sed -n '/^generate:/,$p' $TEST_DIR/a.log) <(sed -n '/^generate:/,$p' $TEST_DIR/b.log) || fail "not reproducible"
gen c ""
rc=$?
[ $rc -eq 2 ] || fail "text prompt without tokenizer: exit $rc, expected 2"
grep "needs a tokenizer file" $TEST_DIR/c.log
