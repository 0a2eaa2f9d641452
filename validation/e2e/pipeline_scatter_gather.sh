#!/usr/bin/env bash
# Scatter/gather between pipeline stages (train/pipeline.c): with tp > 1 and no sequence
# parallelism a stage's activation is replicated over tp, so each tp rank sends its 1/tp of it to
# the next stage (and of the gradient back) and the receiving stage all-gathers the rest over tp.
# On tp 2 x pp 2 (1F1B and interleaved v 2), dp 2 x tp 2 x pp 2 with ZeRO-1, tp 2 x pp 2 x cp 2,
# and a tiny Llama
# (GQA, one k/v head) on tp 2 x pp 2: bit-identical losses, gradient norms and final weights to
# the same run with LLMT_PP_WHOLE=1 (the test knob that sends the whole activation from every tp
# rank: the gather only moves bytes); the serial run's losses (rel. 1e-6) and gradient norms
# (rel. 1e-5); the end-of-run table's pp MiB per step on every rank = the analytic bytes,
# micro-batches x messages x B T C x 4 bytes / tp, and tp times that with LLMT_PP_WHOLE=1. With
# sequence parallelism the message is the rank's rows, N / tp: the same bytes, nothing gathered.
# tp 2 x pp 2 on the simulated device (LLMT_DEVSIM=1): the CPU run's step records.
source "$(dirname "$0")/lib.bash"
nml() { # name dp tp pp schedule [extra &parallel] [extra &model]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model n_layer = 4, n_head = 4, d_model = 128, d_ff = 256, vocab_size = 500, seq_len = 128 ${7:-} /
&parallel dp = $2, tp = $3, pp = $4, schedule = '$5' ${6:-} /
&train max_steps = 4, micro_batch = 2, global_batch = 8, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&log every = 4 /
NML
}
col() { # name column: the column of the end-of-run table (7: pp MiB per step), one per rank
    sed -n '/^time split/,/^memory per rank/p' "$TEST_DIR/$1.log" | awk -v c="$2" 'NF == 10 && $1 ~ /^[0-9]+$/ {printf "%s ", $c}'
}
pp_mib() { # name want: every rank's pp MiB per step is want
    local got
    for got in $(col "$1" 7); do
        [ "$got" = "$2" ] || fail "$1: pp MiB per step per rank '$(col "$1" 7)', analytic $2 each"
    done
}
LLAMA="norm = 'rmsnorm', pos = 'rope', mlp = 'swiglu', n_kv_head = 1, tie_embeddings = .false., bias = .false."
nml serial 1 1 1 1f1b && run_ranks serial 1
nml serial_llama 1 1 1 1f1b "" "$LLAMA" && run_ranks serial_llama 1
# a message: B T C floats = 2 x 128 x 128; micro-batches per rank a step: global 8 / dp / micro_batch 2
MSG_MIB=$(awk 'BEGIN { printf "%.6f", 2 * 128 * 128 * 4 / 1048576 }')
# msgs: messages a rank sends per micro-batch, 2 (pp v - 1) / pp (pp v - 1 stage boundaries, each
# crossed forward and backward, spread evenly over pp ranks): 1 for 1F1B on pp 2, 3 for v 2
# (with cp 2, half the rows: 0.5 x that)
#    name        dp tp pp cp schedule    extra-&parallel            msgs ref
while read -r name dp tp pp cp sched extra msgs ref; do
    [ "$extra" = - ] && extra=""
    mextra=""
    [ "$ref" = serial_llama ] && mextra="$LLAMA"
    np=$((dp * tp * pp * cp))
    nml "$name" "$dp" "$tp" "$pp" "$sched" "cp = $cp $extra" "$mextra"
    run_ranks "$name" $np
    printf '%-24s ' "$name"
    a="$TEST_DIR/$ref/metrics.jsonl" b="$TEST_DIR/$name/metrics.jsonl"
    same_series "losses vs $ref" 1e-6 <(losses "$a") <(losses "$b") | tr '\n' ' ' ||
        fail "$name: losses differ from $ref by more than 1e-6 relative"
    same_series "norms" 1e-5 <(norms "$a") <(norms "$b") | tr '\n' ' ' ||
        fail "$name: gradient norms differ from $ref by more than 1e-5 relative"
    echo
    share=$(awk -v m="$MSG_MIB" -v n=$((8 / dp / 2)) -v v="$msgs" -v tp="$tp" 'BEGIN { printf "%.2f", n * v * m / tp }')
    pp_mib "$name" "$share"
    case $extra in *sequence_parallel*) echo "  pp MiB per step per rank $(col "$name" 7)(analytic $share: N / tp rows)"; continue ;; esac
    sed "s/name = '$name'/name = '${name}_whole'/" "$TEST_DIR/$name.nml" >"$TEST_DIR/${name}_whole.nml"
    LLMT_PP_WHOLE=1 run_ranks "${name}_whole" $np
    cmp <(train_records "$b") <(train_records "$TEST_DIR/${name}_whole/metrics.jsonl") >/dev/null ||
        fail "$name: the step records differ from LLMT_PP_WHOLE=1's"
    $PYTHON validation/compare_weights.py --atol 0 "$TEST_DIR/$name/weights_step000004.h5" \
        "$TEST_DIR/${name}_whole/weights_step000004.h5" >"$TEST_DIR/$name.weights" ||
        { cat "$TEST_DIR/$name.weights"; fail "$name: final weights differ from LLMT_PP_WHOLE=1's"; }
    whole=$(awk -v m="$MSG_MIB" -v n=$((8 / dp / 2)) -v v="$msgs" 'BEGIN { printf "%.2f", n * v * m }')
    pp_mib "${name}_whole" "$whole"
    echo "  pp MiB per step per rank $(col "$name" 7)(analytic $share), whole messages $(col "${name}_whole" 7)(analytic $whole); bit-identical"
done <<'CASES'
tp2pp2        1 2 2 1 1f1b        -                          1   serial
tp2pp2_v2     1 2 2 1 interleaved virtual_stages=2           3   serial
dp2tp2pp2_z1  2 2 2 1 1f1b        zero_stage=1               1   serial
tp2pp2cp2     1 2 2 2 1f1b        -                          0.5 serial
llama_tp2pp2  1 2 2 1 1f1b        -                          1   serial_llama
tp2pp2_sp     1 2 2 1 1f1b        sequence_parallel=.true.   1   serial
CASES
# the simulated device (device memory closed to the host, collectives through the staged
# transport): the same step records as on the CPU
sed "s/name = 'tp2pp2'/name = 'tp2pp2_devsim'/" "$TEST_DIR/tp2pp2.nml" >"$TEST_DIR/tp2pp2_devsim.nml"
LLMT_DEVSIM=1 run_ranks tp2pp2_devsim 4
cmp <(train_records "$TEST_DIR/tp2pp2/metrics.jsonl") <(train_records "$TEST_DIR/tp2pp2_devsim/metrics.jsonl") >/dev/null ||
    fail "tp2pp2 on LLMT_DEVSIM=1: the step records differ from the CPU's"
echo "tp2pp2 on LLMT_DEVSIM=1: the CPU run's step records"
echo "pipeline_scatter_gather: ok"
