#!/usr/bin/env bash
# Checkpoints are grid-independent: a run on (dp,tp,pp) = (2,2,2) saves at step 5 and 10; its
# step-5 checkpoint resumes on (2,2,2) (bit-identical continuation), (1,1,1), (4,2,1), (1,2,4) and
# (8,1,1), each continuing to step 10 with losses within 1e-5 relative of the uninterrupted run.
# The resumed namelists leave global_batch unset: it comes from the checkpoint (8 sequences), so
# the accumulation adjusts to each grid (8 micro-batches on 1 rank, 1 on dp = 8).
# The interleaved schedule (virtual_stages 2: stage 0 holds layers 0 and 2, stage 1 layers 1 and 3)
# likewise: its step-5 checkpoint resumes on its own grid with the step records (loss, lr, gradient
# norm) bit-identical, and on (1,1,1) and on pp 2 with 1F1B within 1e-5 (a resume once loaded the
# stages' layers as if contiguous: other norms from step 6 on).
# h5py reads every tensor of the checkpoint in its global shape, /model equals the final weights
# file and the AdamW moments are there.
source "$(dirname "$0")/lib.bash"
nml() { # name dp tp pp resume [global_batch [more &parallel keys]]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 3 /
&model n_layer = 4, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = 16 /
&parallel dp = $2, tp = $3, pp = $4 ${7:+, $7} /
&train max_steps = 10, micro_batch = 1, global_batch = ${6:-0}, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 5, keep = 3, resume = '$5' /
&log every = 5 /
NML
}
nml save 2 2 2 none 8
$MPIRUN -np 8 ./llmtrain $TEST_DIR/save.nml >$TEST_DIR/save.log 2>&1 || { tail $TEST_DIR/save.log; fail "saving run failed"; }
grep "^checkpoint:" $TEST_DIR/save.log
ck=$TEST_DIR/save/ckpt_step00000005.h5
[ -f $ck ] || fail "no step-5 checkpoint"
want=$(losses $TEST_DIR/save/metrics.jsonl | tail -5 | tr '\n' ' ')
for g in 2,2,2 1,1,1 4,2,1 1,2,4 8,1,1; do
    IFS=, read -r dp tp pp <<<"$g"
    name=resume_${dp}${tp}${pp}
    nml $name $dp $tp $pp $ck
    $MPIRUN -np $((dp * tp * pp)) ./llmtrain $TEST_DIR/$name.nml >$TEST_DIR/$name.log 2>&1 ||
        { tail $TEST_DIR/$name.log; fail "$name failed"; }
    grep -q "^resume: .*step 5" $TEST_DIR/$name.log || fail "$name did not resume from step 5"
    grep -q "^batch: global 8 sequences" $TEST_DIR/$name.log || fail "$name did not keep the global batch of 8"
    got=$(losses $TEST_DIR/$name/metrics.jsonl | tr '\n' ' ')
    if [ "$g" = 2,2,2 ]; then
        [ "$got" = "$want" ] || fail "same-grid resume not bit-identical: $got vs $want"
        echo "$name: bit-identical to the uninterrupted run"
        continue
    fi
    paste <(echo $want | tr ' ' '\n') <(echo $got | tr ' ' '\n') | awk -v n=$name '{e = ($1 - $2) / $1;
        if (e < 0) e = -e; if (e > w) w = e; c++} END {printf "%s: steps 6-10 worst rel.err %.1e\n", n, w;
        exit !(c == 5 && w <= 1e-5)}' || fail "$name: continued losses differ"
done
# the interleaved pipeline
IL="schedule = 'interleaved', virtual_stages = 2"
nml isave 1 1 2 none 8 "$IL"
$MPIRUN -np 2 ./llmtrain $TEST_DIR/isave.nml >$TEST_DIR/isave.log 2>&1 || { tail $TEST_DIR/isave.log; fail "interleaved saving run failed"; }
ick=$TEST_DIR/isave/ckpt_step00000005.h5
[ -f $ick ] || fail "no interleaved step-5 checkpoint"
iwant=$(train_records $TEST_DIR/isave/metrics.jsonl | tail -5)
for g in "1,1,2,$IL" "1,1,1," "1,1,2,schedule = '1f1b'"; do
    IFS=, read -r dp tp pp more <<<"$g"
    name=iresume_${dp}${tp}${pp}_$(echo "${more:-none}" | tr -dc 'a-z0-9' | cut -c1-12)
    nml $name $dp $tp $pp $ick 0 "$more"
    $MPIRUN -np $((dp * tp * pp)) ./llmtrain $TEST_DIR/$name.nml >$TEST_DIR/$name.log 2>&1 ||
        { tail $TEST_DIR/$name.log; fail "$name failed"; }
    grep -q "^resume: .*step 5" $TEST_DIR/$name.log || fail "$name did not resume from step 5"
    got=$(train_records $TEST_DIR/$name/metrics.jsonl)
    if [ "$more" = "$IL" ]; then
        [ "$got" = "$iwant" ] || { diff <(echo "$iwant") <(echo "$got"); fail "interleaved resume on its own grid: step records differ"; }
        echo "$name: step records (loss, lr, gradient norm) bit-identical to the uninterrupted run"
        continue
    fi
    for what in losses norms; do
        paste <($what $TEST_DIR/isave/metrics.jsonl | tail -5) <($what $TEST_DIR/$name/metrics.jsonl) |
            awk -v n="$name $what" '{e = ($1 - $2) / $1; if (e < 0) e = -e; if (e > w) w = e; c++}
                END {printf "%s: steps 6-10 worst rel.err %.1e\n", n, w; exit !(c == 5 && w <= 1e-5)}' ||
            fail "$name: continued $what differ from the interleaved run's"
    done
done
$PYTHON - $TEST_DIR/save/ckpt_step00000010.h5 $TEST_DIR/save/weights_step000010.h5 <<'PY' || fail "h5py check failed"
import sys, h5py, numpy as np
ck, w = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert ck.attrs["kind"] == b"checkpoint" or ck.attrs["kind"] == "checkpoint", ck.attrs["kind"]
assert ck.attrs["step"] == 10 and ck.attrs["grid_tp"] == 2 and ck.attrs["sample_pos"] == 80
n = 0
for name, d in ck["model"].items():
    assert np.array_equal(d[...], w["model"][name][...]), name
    for g in ("m", "v"):
        assert ck["optimizer/adamw/%s/%s" % (g, name)].shape == d.shape, (g, name)
    n += 1
assert ck["model/wte"].shape == (512, 32) and ck["model/h.3.attn.qkv.w"].shape == (96, 32)
assert "checksum" in ck["model/wte"].attrs
print("h5py: %d tensors x (model, m, v) in global shapes; /model equals the weights file" % n)
PY
