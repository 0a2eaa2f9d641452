#!/usr/bin/env bash
# A checkpoint written by the llmtrain before sharded I/O (main at 7360478: the ZeRO partitions
# gathered on dp rank 0, one writer; format_version 1, which sharded I/O still writes) loads:
# fixtures/ckpt_v1_main_tp2_step2.h5.gz, step 2 of a 4-step run on tp 2 (namelist below, seed 11),
# resumes on tp 2 (its own grid), on 1 rank, and on dp 2 with ZeRO-3 and staging_mb = 0.0005
# (131-float pieces), and steps 3-4 give that old binary's losses (6.19620299, 6.20223641) within
# 1e-5 relative. The new binary's own step-2 checkpoint of the same run holds the same tensors
# (h5py: every dataset within 1e-6 of its largest value; bit-identical on the machine that wrote
# the fixture) and the same checksum attributes wherever the tensors are bit-identical.
source "$(dirname "$0")/lib.bash"
old=$TEST_DIR/old_step2.h5
gunzip -c validation/e2e/fixtures/ckpt_v1_main_tp2_step2.h5.gz >$old
nml() { # name dp tp zero_stage staging_mb resume
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 11 /
&model n_layer = 1, n_head = 2, d_model = 8, d_ff = 32, vocab_size = 500, seq_len = 8 /
&parallel dp = $2, tp = $3, zero_stage = $4 /
&train max_steps = 4, micro_batch = 1, global_batch = 2, lr = 3e-3, warmup_steps = 1 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 2, keep = 3, resume = '$6', staging_mb = $5 /
&log every = 1 /
NML
}
want="6.19620299 6.20223641"
for g in 1,2,0,64 1,1,0,64 2,1,3,0.0005; do
    IFS=, read -r dp tp z mb <<<"$g"
    name=res_$dp$tp$z
    nml $name $dp $tp $z $mb $old
    $MPIRUN -np $((dp * tp)) ./llmtrain $TEST_DIR/$name.nml >$TEST_DIR/$name.log 2>&1 ||
        { tail $TEST_DIR/$name.log; fail "$name failed"; }
    grep -q "^resume: .*step 2" $TEST_DIR/$name.log || fail "$name did not resume from the old file"
    got=$(losses $TEST_DIR/$name/metrics.jsonl | tr '\n' ' ')
    paste <(echo $want | tr ' ' '\n') <(echo $got | tr ' ' '\n') | awk -v n=$name '{e = ($1 - $2) / $1;
        if (e < 0) e = -e; if (e > w) w = e; c++} END {printf "%s: steps 3-4 vs the old binary: worst rel.err %.1e\n", n, w;
        exit !(c == 2 && w <= 1e-5)}' || fail "$name: losses $got, the old binary's $want"
done
nml new 1 2 0 64 none
$MPIRUN -np 2 ./llmtrain $TEST_DIR/new.nml >$TEST_DIR/new.log 2>&1 || { tail $TEST_DIR/new.log; fail "new run failed"; }
$PYTHON - $old $TEST_DIR/new/ckpt_step00000002.h5 <<'PY' || fail "the new file differs from the old binary's"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "config" else None)
worst, same, sums = 0.0, 0, 0
for n in names:
    x, y = a[n][()], b[n][()]
    worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(x)) + 1e-30)))
    if x.tobytes() == y.tobytes():
        same += 1
        sums += int(a[n].attrs["checksum"]) == int(b[n].attrs["checksum"])
print(f"{len(names)} datasets of the old binary's file: worst difference {worst:.1e} of the largest "
      f"value; {same} bit-identical, of which {sums} with the same checksum attribute; format_version "
      f"{a.attrs['format_version']} and {b.attrs['format_version']}")
sys.exit(0 if worst <= 1e-6 and sums == same and a.attrs["format_version"] == b.attrs["format_version"] else 1)
PY
echo PASS
