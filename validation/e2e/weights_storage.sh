#!/usr/bin/env bash
# The bf16/fp16 weights copy kept in 16-bit storage (&train weights_storage = '16bit': the model's
# matrices as bf16/fp16 elements that the products and the embedding read as they are, norms and
# biases as fp32 values beside them) computes exactly what the copy kept as rounded values in fp32
# arrays computes (weights_storage = 'fp32', the emulation the rest of the suite checks against fp32
# and PyTorch): for each configuration the step records (loss, lr, grad norm, val loss) and the
# final weights must be bit-identical. A stored element read as a float, a weight row offset counted
# in floats, or a norm left unwidened changes every number. The configurations reach every weight
# the model has: GPT-2 (tied wte, wpe; the last stage's copy of wte on pp 2), an interleaved
# pipeline (2 chunks per stage) with full recomputation, Llama with replicated k/v heads (n_kv_head
# 2 < tp 4: the k/v row offset), MoE experts on ep 2 (the experts' offsets), fp16 with its loss
# scaler (fp16 weights, which the CPU widens for its fp32 products), pp 2 with ZB-H1 (post-
# validation rewrites the copy), a resume (the copy rebuilt from the checkpoint's master),
# generation, ZeRO-1/2 (the copy gathered as 16-bit elements, its norms and biases widened again),
# ZeRO-3 (16-bit partitions, each unit gathered as 16-bit elements before use, rotating and resident
# buffers), the offloaded optimizer (16-bit uploads, alone and with ZeRO-1 and ZeRO-3), and
# LLMT_DEVSIM=1 (the store, the products and the 16-bit gathers on the simulated device and its
# staged transport). The parameters' memory is measured and planned at 2 bytes per matrix element;
# '16bit' in an fp32 run is refused (exit 2, one message).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash" # MOE_KEYS
ulimit -c 0
write_tiny_nml "$TEST_DIR/t.nml" name=r max_steps=4 mb=2 gb=8 val_every=2
echo "&checkpoint every = 2 /" >>"$TEST_DIR/t.nml"
# check NAME NP [overrides]: the run with both storages; the records and final weights identical
check() { storage_pair weights_storage "weights copy" "$@"; }
BF16=train.precision="'bf16'"
check gpt2_bf16 1 "$BF16"
check fp16_dp2 2 train.precision="'fp16'" parallel.dp=2
check llama_kvrep 4 "$BF16" model.arch="'llama'" model.n_kv_head=2 parallel.tp=4
check moe_ep2 2 "$BF16" parallel.dp=2 parallel.ep=2 "${MOE_KEYS[@]}"
check zbh1_pp2 2 "$BF16" parallel.pp=2 parallel.schedule="'zb-h1'"
check interleaved 2 "$BF16" model.n_layer=4 parallel.pp=2 parallel.schedule="'interleaved'" \
    parallel.virtual_stages=2 parallel.recompute="'full'"
check zero1_dp2 2 "$BF16" parallel.dp=2 parallel.zero_stage=1
check zero2_dp2pp2 4 train.precision="'fp16'" parallel.dp=2 parallel.pp=2 parallel.zero_stage=2
check offload 1 "$BF16" train.offload="'optimizer'"
check offload_z1 2 "$BF16" train.offload="'optimizer'" parallel.dp=2 parallel.zero_stage=1
check offload_z3 2 "$BF16" train.offload="'optimizer'" parallel.dp=2 parallel.zero_stage=3
check zero3_dp2 2 "$BF16" parallel.dp=2 parallel.zero_stage=3
check zero3_res_tp2 4 "$BF16" parallel.dp=2 parallel.tp=2 parallel.zero_stage=3 parallel.zero3_resident=.true.
LLMT_DEVSIM=1 check devsim_dp2 2 "$BF16" parallel.dp=2
LLMT_DEVSIM=1 check devsim_z3 2 "$BF16" parallel.dp=2 parallel.zero_stage=3
LLMT_DEVSIM=1 check devsim_z2_off 2 "$BF16" parallel.dp=2 parallel.zero_stage=2 train.offload="'optimizer'"
grep -q '^compute: cpu-devsim backend' "$TEST_DIR/devsim_dp2-16bit.log" || fail "devsim: the simulated device was not used"

# a resume from step 2's checkpoint (the master from the file, the copy rounded from it: the
# path a rollback takes too) equals the uninterrupted run
for w in 16bit fp32; do
    cp -r "$TEST_DIR/gpt2_bf16-$w" "$TEST_DIR/resume-$w"
    rm -f "$TEST_DIR/resume-$w"/r/*step000004* "$TEST_DIR/resume-$w"/r/*step000003*
    timeout 300 $MPIRUN -np 1 ./llmtrain "$TEST_DIR/t.nml" run.out_dir="'$TEST_DIR/resume-$w'" "$BF16" \
        train.weights_storage="'$w'" checkpoint.resume="'auto'" checkpoint.every=0 \
        >"$TEST_DIR/resume-$w.log" 2>&1 || { tail -20 "$TEST_DIR/resume-$w.log"; fail "resume ($w)"; }
done
grep -q "resum" "$TEST_DIR/resume-16bit.log" || fail "resume: the run did not resume"
same_weights "$TEST_DIR/resume-16bit/r/weights_step000004.h5" "$TEST_DIR/gpt2_bf16-16bit/r/weights_step000004.h5" ||
    fail "resume (16bit): final weights differ from the uninterrupted run's"
echo "resume       1 rank:  16-bit storage resumed from step 2 = the uninterrupted run (final weights)"

# generation from the bf16 run's weights through the 16-bit store
storage_generate weights_storage "$TEST_DIR/gpt2_bf16-fp32/r/weights_step000004.h5" "$BF16"

# memory: parameters at 2 bytes per matrix element (the table's measured/planned, rank 0)
params_col() { awk '/rank \(dp,tp,pp\)/ {getline; print $3; exit}' "$1"; }
p16=$(params_col "$TEST_DIR/gpt2_bf16-16bit.log") p32=$(params_col "$TEST_DIR/gpt2_bf16-fp32.log")
$PYTHON - "$p16" "$p32" <<'PY' || fail "parameter memory not halved as planned"
import sys
(m16, pl16), (m32, pl32) = [tuple(map(float, a.split("/"))) for a in sys.argv[1:3]]
print(f"parameters   measured/planned MiB: 16-bit {m16}/{pl16}, fp32 arrays {m32}/{pl32}")
# tiny model: 0.13 M matrix elements (x2 bytes) + 3 K norm/bias values (x4 + x2): 0.26 of 0.52 MiB
sys.exit(0 if m16 == pl16 and m32 == pl32 and 0.45 < m16 / m32 < 0.62 else 1)
PY
# '16bit' without a 16-bit weights copy (fp32) is refused: one message, exit 2
write_tiny_nml "$TEST_DIR/bad.nml" extra_train="weights_storage = '16bit'"
check_case fp32_16bit "weights_storage = '16bit' needs a 16-bit weights copy" "$TEST_DIR/bad.nml" 1
echo "PASS"
