#!/usr/bin/env bash
# Bad Llama-family input under 2 ranks (as bad_input_errors.sh): n_kv_head not dividing n_head,
# RoPE with an odd head size, an unknown arch, a kv-head count that neither splits over nor
# divides tp: exit code 2 within 60 s, exactly one error message naming the key, no crash
# banner. And arch = 'llama' with an explicit switch keeps the switch (it wins over the arch
# default), as the effective configuration shows.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
write_tiny_nml $g/good.nml dp=2 gb=8
sed "s/seq_len = 32/seq_len = 32, arch = 'llama', n_kv_head = 3/" $g/good.nml >$g/kv.nml
check_case kv_heads_do_not_divide "&model n_kv_head: n_kv_head = 3 (line 7) must divide n_head = 4" $g/kv.nml
sed "s/seq_len = 32/seq_len = 32, pos = 'rope'/; s/n_head = 4, d_model = 64/n_head = 4, d_model = 68/" \
    $g/good.nml >$g/odd.nml
check_case rope_odd_head_size "&model pos: 'rope' needs an even head size, but d_model / n_head = 68 / 4 = 17" $g/odd.nml
sed "s/seq_len = 32/seq_len = 32, arch = 'mistral'/" $g/good.nml >$g/arch.nml
check_case unknown_arch "arch" $g/arch.nml
grep -F "'mistral'" "$g/unknown_arch.err" >/dev/null || fail "unknown_arch: the value is not named"
sed -e "s/seq_len = 32/seq_len = 32, n_kv_head = 2/" -e "s/dp = 2/dp = 1, tp = 4/" \
    -e "s/global_batch = 8/global_batch = 4/" $g/good.nml >$g/kvtp.nml
sed -i "s/n_head = 4, d_model = 64/n_head = 12, d_model = 96/; s/n_kv_head = 2/n_kv_head = 3/" $g/kvtp.nml
check_case kv_heads_vs_tp "&model n_kv_head = 3 and &parallel tp = 4" $g/kvtp.nml 4

echo "== an explicit switch wins over arch = 'llama'"
sed "s/seq_len = 32/seq_len = 32, arch = 'llama', tie_embeddings = .true., norm = 'layernorm'/" \
    $g/good.nml >$g/explicit.nml
sed -i 's/max_steps = 50/max_steps = 1/' $g/explicit.nml
timeout 60 $MPIRUN -np 2 ./llmtrain $g/explicit.nml >$g/explicit.out 2>&1 || { tail $g/explicit.out; fail "explicit: failed"; }
for want in "norm            = 'layernorm'" "tie_embeddings  = .true." "pos             = 'rope'" \
            "mlp             = 'swiglu'" "bias            = .false."; do
    grep -qF "$want" $g/explicit.out || fail "explicit: the effective configuration lacks \"$want\""
done
h5ls "$g/tiny/weights_step000001.h5/model" | grep -q "lm_head" && fail "explicit: a tied model wrote lm_head.w"
h5ls "$g/tiny/weights_step000001.h5/model" | grep -q "h.0.ln1.b" || fail "explicit: layernorm without ln1.b"
echo "ok  explicit switches win: layernorm with its bias, tied head; rope, swiglu, no linear biases from arch"
echo "PASS"
