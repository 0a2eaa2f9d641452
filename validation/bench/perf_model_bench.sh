#!/usr/bin/env bash
# perf_model_bench.sh — the performance model (docs/planning.md) against measurement on this
# machine (not a test): `llmtrain --calibrate` writes build/bench/perfmodel/local.nml (2 ranks),
# then llmscale measures a small model on the grids GRIDS (1 to 8 ranks; rows with more ranks
# than cores are oversubscribed, which the model knows: co-resident ranks fill each other's
# pipeline bubbles) with --predict local.nml, which puts `llmtrain --plan run.nml
# --machine local.nml`'s step time beside each measured row. The target of issue 33 is
# predicted / measured within 25% (0.75..1.25 read as 1/1.25..1.25) on every row that is not
# oversubscribed; the summary counts them, against llmscale's median step and against the
# fastest steady step (the one least disturbed by other load on a shared machine; the
# calibration's rates are best-ofs too). Writes build/bench/perfmodel.md.
# Settings (environment): MODEL ("L,C,NH,T,B,GB": layers, d_model, heads, seq_len, micro_batch,
# global_batch; default 4,128,4,64,4,32), GRIDS (1x1x1,2x1x1,1x2x1,1x1x2,4x1x1,2x1x2,8x1x1,
# 2x2x2,4x1x2,1x2x4), STEPS (10).
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${STEPS:=10}"
export MPIRUN
: "${MODEL:=4,128,4,64,4,32}" "${GRIDS:=1x1x1,2x1x1,1x2x1,1x1x2,4x1x1,2x1x2,8x1x1,2x2x2,4x1x2,1x2x4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT=build/bench/perfmodel
rm -rf $OUT && mkdir -p $OUT
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null
IFS=, read -r L C NH T B GB <<<"$MODEL"
$MPIRUN -np 2 ./llmtrain --calibrate $OUT/local.nml || { echo "perf_model_bench: --calibrate failed"; exit 1; }
cat >$OUT/base.nml <<NML
&run name = 'perf', out_dir = '$OUT' /
&model n_layer = $L, n_head = $NH, d_model = $C, d_ff = $((4 * C)), vocab_size = 500, seq_len = $T /
&parallel dp = 1, tp = 1, pp = 1 /
&train max_steps = $STEPS, micro_batch = $B, global_batch = $GB, lr = 1e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&log every = 1 /
NML
peak=$(sed -n 's/^ *peak_tflops_fp32 = //p' $OUT/local.nml)
$PYTHON src/tools/llmscale.py $OUT/base.nml --grids "$GRIDS" --steps "$STEPS" --out $OUT/study \
    --predict $OUT/local.nml --peak-flops "$(awk -v p="$peak" 'BEGIN {print p * 1e12}')" --trainer ./llmtrain ||
    echo "perf_model_bench: some runs failed (see $OUT/study/results.md)"
{
    echo "# The performance model against measurement here"
    echo
    echo "Model L=$L, C=$C, heads $NH, T=$T, micro_batch $B, global_batch $GB, fp32, one thread per rank;"
    echo "$STEPS steps per grid (llmscale medians); machine file measured by \`llmtrain --calibrate\` just before:"
    echo
    echo '```'
    grep -v '^ *!' $OUT/local.nml | tr '\n' ' ' | sed 's/  */ /g'
    echo
    echo '```'
    sed -n '/^## Predicted/,$p' $OUT/study/results.md | sed '1d'
    echo
    $PYTHON - $OUT/study $STEPS <<'PY'
import csv, json, os, sys
study, steps = sys.argv[1], int(sys.argv[2])
warm = min(max(1, steps // 4), steps - 1)  # llmscale's default warm-up
rows = [r for r in csv.DictReader(open(os.path.join(study, "predictions.csv"))) if r["ratio"]]
for r in rows:  # the fastest steady step: the one least disturbed by other load (calibration is a best-of)
    recs = [json.loads(l) for l in open(os.path.join(study, "runs", r["grid"], "metrics.jsonl")) if '"ms"' in l]
    r["fastest"] = min(x["ms"] for x in recs if isinstance(x.get("step"), int) and x["step"] > warm)
print("| grid | fastest steady step ms | predicted ms | predicted / fastest |")
print("|---|--:|--:|--:|")
for r in rows:
    print("| %s | %.2f | %.2f | %.2f |" % (r["grid"], r["fastest"], float(r["predicted_ms"]),
                                          float(r["predicted_ms"]) / r["fastest"]))
print()
within = lambda x: 1 / 1.25 <= x <= 1.25
plain = [r for r in rows if r["oversubscribed"] == "0"]
for label, key in (("median", lambda r: float(r["ratio"])),
                   ("fastest", lambda r: float(r["predicted_ms"]) / r["fastest"])):
    print("- against the %s step: within 25%% on %d of %d rows that are not oversubscribed (%s); "
          "oversubscribed: %s" % (label, sum(within(key(r)) for r in plain), len(plain),
                                  ", ".join("%s %.2f" % (r["grid"], key(r)) for r in plain) or "none",
                                  ", ".join("%s %.2f" % (r["grid"], key(r)) for r in rows
                                            if r["oversubscribed"] == "1") or "none"))
PY
    echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(getconf _NPROCESSORS_ONLN) cores."
} >build/bench/perfmodel.md
cat build/bench/perfmodel.md
