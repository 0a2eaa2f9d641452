#!/usr/bin/env bash
# Initialisation schemes are grid-invariant: for &model init = 'gpt2' (init_std 0.05, no depth
# scaling), 'xavier' (per-layer depth scaling), 'kaiming' (1/sqrt(2 n_layer)) and 'small', the
# step-0 weights file (weights_step000000.h5) of tp 2 x pp 2 is bit-identical (h5diff without
# tolerance) to the 1-process one, and for 'xavier' also on tp 4 and dp 2 x pp 2; the schemes
# give different models (the key is not ignored). The per-tensor statistics of each scheme are
# checked in validation/unit/test_init_scheme.c.
source "$(dirname "$0")/lib.bash"
init_nml() { # name dp,tp,pp init init_std depth
    IFS=, read -r dp tp pp <<<"$2"
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 4, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = 16,
       init = '$3', init_std = $4, init_depth_scaled = '$5' /
&parallel dp = $dp, tp = $tp, pp = $pp /
&train max_steps = 1, micro_batch = 1, global_batch = 4 /
&data train_files = 'data/tiny/train_*.bin' /
NML
}
run() { # name np
    timeout 120 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$1.log"; fail "$1 exited non-zero"; }
}
w0() { echo "$TEST_DIR/$1/weights_step000000.h5"; }
for s in gpt2:0.05:none xavier:0.02:layer kaiming:0.02:total small:0.02:layer; do
    IFS=: read -r scheme std depth <<<"$s"
    init_nml ${scheme}_serial 1,1,1 $scheme $std $depth
    run ${scheme}_serial 1
    grids="1,2,2"
    [ "$scheme" = xavier ] && grids="1,2,2 1,4,1 2,1,2"
    for g in $grids; do
        IFS=, read -r dp tp pp <<<"$g"
        name=${scheme}_dp${dp}tp${tp}pp${pp}
        init_nml $name $g $scheme $std $depth
        run $name $((dp * tp * pp))
        h5diff "$(w0 ${scheme}_serial)" "$(w0 $name)" /model /model >"$TEST_DIR/$name.diff" ||
            { head "$TEST_DIR/$name.diff"; fail "$name: step-0 weights differ from the serial ones"; }
        echo "init = '$scheme', init_std = $std, init_depth_scaled = '$depth': dp $dp x tp $tp x pp $pp step-0 weights bit-identical to 1 process"
    done
done
for a in gpt2 xavier kaiming; do
    h5diff -q "$(w0 ${a}_serial)" "$(w0 small_serial)" /model/h.0.attn.qkv.w /model/h.0.attn.qkv.w >/dev/null &&
        fail "init = '$a' and 'small' give the same h.0.attn.qkv.w"
done
echo "the four schemes give four different models"
