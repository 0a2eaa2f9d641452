#!/usr/bin/env bash
# Sharded checkpoint I/O in pieces that cut rows and tp blocks anywhere: &checkpoint staging_mb =
# 0.002 (524 floats; rows are 32 and 128 long, qkv's tp blocks 16) on dp 2 x tp 2 with ZeRO-3
# (each rank writes its partition of its tp shard, ~100 collective writes a group) gives the same
# file as the default 64 MiB (one piece a tensor) on the same grid: h5py finds every dataset of
# /model and /optimizer bit-identical, and every checksum attribute equal to numpy's checksum of
# the dataset (validation/merge_reference.py). That file resumes with the same small staging on
# (1,1,1) and on dp 2 x tp 2 x ZeRO-1, losses within 1e-5 relative of the 1-rank run, and on its
# own grid bit-identically. The MoE model of lib_moe.bash on dp 2 x ep 2 with ZeRO-1 (expert
# tensors [E, rows, cols]: pieces cut them across experts and rows) writes with staging_mb =
# 0.002 the same file, bit for bit, as with 64. staging_mb = 0.0001 (26 floats) and 1e6 (more than the node's free
# memory) are refused with one message naming staging_mb, exit 2.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash"
nml() { # name dp tp zero_stage staging_mb resume
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = 16 /
&parallel dp = $2, tp = $3, zero_stage = $4 /
&train max_steps = 4, micro_batch = 1, global_batch = 4, lr = 3e-3, warmup_steps = 1 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 2, keep = 3, resume = '$6', staging_mb = $5 /
&log every = 1 /
NML
}
run() { # name ranks
    $MPIRUN -np $2 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "$1 failed"; }
}
nml ref 2 2 3 64 none && run ref 4
nml tiny 2 2 3 0.002 none && run tiny 4
nml ref1 1 1 0 64 none && run ref1 1
$PYTHON - $TEST_DIR/ref/ckpt_step00000002.h5 $TEST_DIR/tiny/ckpt_step00000002.h5 <<'PY' || fail "files differ"
import sys, h5py, numpy as np
sys.path.insert(0, "validation")
from merge_reference import checksum
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "config" else None)
differ, bad = [], []
for n in names:
    x, y = a[n][()], b[n][()]
    if x.shape != y.shape or x.tobytes() != y.tobytes():
        differ.append(n)
    for f, d in ((a, x), (b, y)):
        if int(f[n].attrs["checksum"]) != checksum(d):
            bad.append(n)
print(f"{len(names)} datasets: not bit-identical with 524-float pieces: {differ}; checksums not "
      f"matching numpy: {bad}")
sys.exit(0 if not differ and not bad and len(names) == 3 * len(a["model"]) else 1)
PY
moe_nml max_steps=2
run_moe moe_ref 4 parallel.dp=4 parallel.ep=2 parallel.zero_stage=1 checkpoint.every=2
run_moe moe_tiny 4 parallel.dp=4 parallel.ep=2 parallel.zero_stage=1 checkpoint.every=2 checkpoint.staging_mb=0.002
$PYTHON - $TEST_DIR/moe_ref/ckpt_step00000002.h5 $TEST_DIR/moe_tiny/ckpt_step00000002.h5 <<'PY' || fail "MoE files differ"
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "config" else None)
differ = [n for n in names if a[n][()].tobytes() != b[n][()].tobytes() or a[n].attrs["checksum"] != b[n].attrs["checksum"]]
experts = [n for n in names if a[n].ndim == 3]
print(f"MoE: {len(names)} datasets ({len(experts)} of them 3-D expert tensors); not bit-identical "
      f"with 524-float pieces: {differ}")
sys.exit(0 if not differ and experts else 1)
PY
ck=$TEST_DIR/tiny/ckpt_step00000002.h5
want=$(losses $TEST_DIR/ref1/metrics.jsonl | tail -2 | tr '\n' ' ')
for g in 1,1,0 2,2,1; do
    IFS=, read -r dp tp z <<<"$g"
    nml res_$dp$tp$z $dp $tp $z 0.002 $ck && run res_$dp$tp$z $((dp * tp))
    grep -q "^resume: .*step 2" $TEST_DIR/res_$dp$tp$z.log || fail "res_$dp$tp$z did not resume from step 2"
    got=$(losses $TEST_DIR/res_$dp$tp$z/metrics.jsonl | tr '\n' ' ')
    paste <(echo $want | tr ' ' '\n') <(echo $got | tr ' ' '\n') | awk -v n=res_$dp$tp$z '{e = ($1 - $2) / $1;
        if (e < 0) e = -e; if (e > w) w = e; c++} END {printf "%s: steps 3-4 worst rel.err %.1e\n", n, w;
        exit !(c == 2 && w <= 1e-5)}' || fail "res_$dp$tp$z: losses differ: $got vs $want"
done
nml same 2 2 3 0.002 $ck && run same 4
got=$(train_records $TEST_DIR/same/metrics.jsonl | tr '\n' ' ')
want=$(train_records $TEST_DIR/tiny/metrics.jsonl | tail -2 | tr '\n' ' ')
[ "$got" = "$want" ] || fail "same-grid resume not bit-identical: $got vs $want"
echo "same grid: steps 3-4 bit-identical"
for mb in 0.0001 1e6; do
    nml bad 1 1 0 $mb none
    $MPIRUN -np 2 ./llmtrain $TEST_DIR/bad.nml parallel.dp=2 >$TEST_DIR/bad.log 2>&1
    rc=$?
    [ $rc -eq 2 ] || { cat $TEST_DIR/bad.log; fail "staging_mb = $mb: exit $rc, not 2"; }
    [ "$(grep -c "error:" $TEST_DIR/bad.log)" -eq 1 ] && grep -q "error: &checkpoint staging_mb" $TEST_DIR/bad.log ||
        { cat $TEST_DIR/bad.log; fail "staging_mb = $mb: not one message naming it"; }
    echo "staging_mb = $mb: $(grep error: $TEST_DIR/bad.log)"
done
echo PASS
