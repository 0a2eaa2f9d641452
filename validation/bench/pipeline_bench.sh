#!/usr/bin/env bash
# pipeline_bench.sh — part of `make bench`: the parallelism measurements of docs/benchmarks.md.
# A 8-layer model (C=256) on pp=4 with GPipe and with 1F1B (8 micro-batches), and on a 2x2x2 grid:
# peak activation memory per stage, measured bubble vs (p-1)/(m+p-1), bytes per communicator vs
# the analytic count, the time split per step. On this 2-core machine every rank shares 2 cores,
# so the times are those of an oversubscribed run: the byte counts and memory are exact, the
# bubble is indicative only.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT=build/bench
mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
run() { # name dp tp pp schedule
    cat >$OUT/$1.nml <<NML
&run name = '$1', out_dir = '$OUT' /
&model n_layer = 8, n_head = 8, d_model = 256, d_ff = 1024, vocab_size = 500, seq_len = 64 /
&parallel dp = $2, tp = $3, pp = $4, schedule = '$5', bucket_mb = 1 /
&train max_steps = 6, micro_batch = 2, global_batch = $((16 * $2)), lr = 1e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = 6 /
NML
    $MPIRUN -np $(($2 * $3 * $4)) ./llmtrain $OUT/$1.nml >$OUT/$1.log 2>&1 || { tail $OUT/$1.log; exit 1; }
}
run pp4_gpipe 1 1 4 gpipe
run pp4_1f1b 1 1 4 1f1b
run grid_2x2x2 2 2 2 1f1b
$PYTHON validation/bench/pipeline_report.py $OUT/pp4_gpipe.log $OUT/pp4_1f1b.log $OUT/grid_2x2x2.log | tee $OUT/pipeline.md
