#!/usr/bin/env bash
# checkpoint_bench.sh — part of `make bench`: checkpoint write and read bandwidth next to the raw
# sequential write bandwidth of the same file system for the same bytes (dd with fdatasync),
# side by side in one run, and the time a save adds to the step where it happens.
# Model: 8 layers, C=512, GPT-2 vocabulary (51M parameters: 0.6 GB of model + AdamW state),
# grid dp=1 x tp=2 x pp=2 on 4 ranks; saved at step 3 of 4, then resumed (read + verify).
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT=build/bench
mkdir -p $OUT data/bench
[ -f data/bench/train_000.bin ] || bash validation/bench/run_bench.sh --data-only
rm -rf $OUT/ckpt
cat >$OUT/ckpt.nml <<NML
&run name = 'ckpt', out_dir = '$OUT' /
&model n_layer = 8, n_head = 8, d_model = 512, vocab_size = 50257, seq_len = 64 /
&parallel tp = 2, pp = 2 /
&train max_steps = 4, micro_batch = 2, global_batch = 4 /
&data train_files = 'data/bench/train_*.bin' /
&checkpoint every = 3, resume = 'auto', save_weights = .false. /
&log every = 1 /
NML
$MPIRUN -np 4 ./llmtrain $OUT/ckpt.nml >$OUT/ckpt_write.log 2>&1 || { tail $OUT/ckpt_write.log; exit 1; }
sed -i "s/max_steps = 4/max_steps = 5/" $OUT/ckpt.nml
$MPIRUN -np 4 ./llmtrain $OUT/ckpt.nml >$OUT/ckpt_read.log 2>&1 || { tail $OUT/ckpt_read.log; exit 1; }
f=$OUT/ckpt/ckpt_step00000004.h5
bytes=$(stat -c %s $f)
sync
t0=$(date +%s.%N)
dd if=/dev/zero of=$OUT/raw.bin bs=4M count=$((bytes / 4194304 + 1)) conv=fdatasync status=none
t1=$(date +%s.%N)
rm -f $OUT/raw.bin
raw=$(awk -v b=$bytes -v a=$t0 -v c=$t1 'BEGIN {printf "%.0f", b / 1048576 / (c - a)}')
echo "checkpoint file: $(awk -v b=$bytes 'BEGIN {printf "%.1f", b / 1048576}') MiB"
grep "^checkpoint:" $OUT/ckpt_write.log
grep "^resume:" $OUT/ckpt_read.log | sed 's/.*(read/read/'
echo "raw sequential write of the same bytes (dd, fdatasync): $raw MiB/s"
$PYTHON - $OUT/ckpt/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = {r["step"]: r["ms"] for r in rows if "ms" in r and "loss" in r}
saves = [r for r in rows if "ckpt_s" in r]
typical = statistics.median(steps.values())
for s in saves:
    print("save at step %d (%s): +%.0f ms on a step of %.0f ms (%.1fx)"
          % (s["step"], s["checkpoint"], s["ckpt_s"] * 1e3, typical, s["ckpt_s"] * 1e3 / typical))
PY
