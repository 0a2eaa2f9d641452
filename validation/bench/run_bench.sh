#!/usr/bin/env bash
# run_bench.sh — `make bench`: training throughput of llmtrain next to PyTorch (CPU, eager) on
# the same configurations, threads and batch, measured side by side in one run. Not a test.
# Reports median tokens/s over the steady steps and achieved GFLOP/s (same FLOP formula for
# both). Writes build/bench/results.md. THREADS (default 2) and STEPS (default 12) can be set.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${THREADS:=2}" "${STEPS:=12}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/bench
mkdir -p $OUT data/bench
[ -f data/bench/train_000.bin ] || $PYTHON - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
toks = rng.integers(0, 50257, 2_000_000).astype(np.uint16)
h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, len(toks)
open("data/bench/train_000.bin", "wb").write(h.tobytes() + toks.tobytes())
PY
[ "${1:-}" = "--data-only" ] && exit 0

# config name, L, C, NH, T, B
: "${CONFIGS:=gpt2-124m,12,768,12,64,4 small,4,256,4,256,8}"
# OpenBLAS 0.3.21 (Debian 12) does not know the newest Xeons and falls back to SSE3 kernels;
# OPENBLAS_CORETYPE=SkylakeX makes it use its AVX-512 ones. Both settings are measured, for both
# programs, so the comparison is like for like. An OPENBLAS_CORETYPE already set is kept as is.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then CORETYPES="$OPENBLAS_CORETYPE"; else CORETYPES="default SkylakeX"; fi
printf '| model | T | B | OpenBLAS kernels | llmtrain tok/s | llmtrain GFLOP/s | PyTorch %s tok/s (best malloc) | ratio |\n' \
    "$($PYTHON -c 'import torch; print(torch.__version__)')" >$OUT/results.md
printf '|---|---|---|---|---|---|---|---|\n' >>$OUT/results.md
with_coretype() { # coretype command...
    local ct=$1; shift
    if [ "$ct" = default ]; then env -u OPENBLAS_CORETYPE "$@"; else OPENBLAS_CORETYPE=$ct "$@"; fi
}
for cfg in $CONFIGS; do
    IFS=, read -r name L C NH T B <<<"$cfg"
    nml=$OUT/$name.nml
    cat >$nml <<NML
&run name = '$name', out_dir = '$OUT' /
&model n_layer = $L, n_head = $NH, d_model = $C, vocab_size = 50257, seq_len = $T /
&train max_steps = $STEPS, micro_batch = $B, lr = 6e-4, warmup_steps = 0 /
&data train_files = 'data/bench/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = 1 /
NML
    for ct in $CORETYPES; do
        echo "== $name: L=$L C=$C NH=$NH T=$T B=$B, $THREADS threads, OpenBLAS kernels: $ct"
        with_coretype $ct env OMP_NUM_THREADS=$THREADS $MPIRUN -np 1 --bind-to none \
            ./llmtrain $nml >$OUT/$name.log 2>&1 || { tail -20 $OUT/$name.log; echo "llmtrain failed"; exit 1; }
        grep -E "^step" $OUT/$name.log | tail -2
        ours=$($PYTHON - $OUT/$name/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
steady = rows[2:] if len(rows) > 4 else rows  # the first steps pay page faults and warm-up
print("%.1f" % statistics.median(r["tokens_per_s"] for r in steady))
PY
)
        fpt=$(grep -o '[0-9.]* GFLOP per token' $OUT/$name.log | awk '{print $1}')
        gflops=$(awk -v t="$ours" -v f="$fpt" 'BEGIN {printf "%.1f", t * f}')
        best=0
        for tun in "" "glibc.malloc.hugetlb=1"; do
            r=$(with_coretype $ct env GLIBC_TUNABLES=$tun $PYTHON validation/bench/torch_gpt.py \
                --layers $L --d-model $C --heads $NH --seq $T --batch $B --steps $STEPS --threads $THREADS)
            tok=$(echo "$r" | $PYTHON -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tokens_per_s"])')
            echo "   pytorch${tun:+ ($tun)}: $tok tok/s"
            best=$(awk -v a="$best" -v b="$tok" 'BEGIN {print (b > a) ? b : a}')
        done
        ratio=$(awk -v a="$ours" -v b="$best" 'BEGIN {printf "%.2f", a / b}')
        echo "   llmtrain: $ours tok/s ($gflops GFLOP/s) | PyTorch best: $best tok/s | ratio $ratio"
        printf '| %s | %s | %s | %s | %s | %s | %s | %sx |\n' "$name" "$T" "$B" "$ct" "$ours" "$gflops" "$best" "$ratio" >>$OUT/results.md
    done
done
echo
cat $OUT/results.md
[ "${THROUGHPUT_ONLY:-0}" = 1 ] && exit 0
echo
echo "== parallelism measurements (validation/bench/pipeline_bench.sh)"
bash validation/bench/pipeline_bench.sh
echo
echo "== checkpoint bandwidth (validation/bench/checkpoint_bench.sh)"
bash validation/bench/checkpoint_bench.sh
echo
echo "== activation recomputation (validation/bench/recompute_bench.sh)"
bash validation/bench/recompute_bench.sh
echo
echo "== ZeRO x recomputation memory and step time, largest model per 16 GiB (validation/bench/memory_bench.sh)"
bash validation/bench/memory_bench.sh
