#!/usr/bin/env bash
# run_bench.sh — `make bench`: what the CPU backend's matrix products can deliver on the model's
# shapes, and training throughput of llmtrain next to PyTorch (CPU, eager) on the same
# configurations, threads and batch, measured side by side in one run. Not a test.
#  1. GEMM rates (build/bench/bench_gemm): the five products of a GPT-2 layer and the LM head at
#     N = B*T rows, forward and both backward products, through llmtrain's ops (its own split over
#     the threads) and as one library call threaded by the library; median GFLOP/s.
#  2. Throughput: llmtrain for &train precision = 'fp32' and 'bf16' on each configuration, median
#     tokens/s over the steady steps (metrics.jsonl), achieved GFLOP/s (llmtrain's FLOP per token,
#     the same formula for both programs), % of the best GEMM rate of (1) on the same shapes,
#     minor page faults per step (metrics "minor_faults" where llmtrain writes it; always the
#     whole run's count from /usr/bin/time); PyTorch eager (torch_gpt.py, fp32 or bf16 autocast;
#     malloc: the better of glibc's default and glibc.malloc.hugetlb=1 on the first row, then that
#     one); the ratio. The GEMM rates of (1) are measured just before each configuration's rows.
#  3. The other GEMM library (oneDNN / OpenBLAS), when installed: a second llmtrain built in
#     build/bench/<lib>-tree (a copy of src/ and the Makefiles), the fp32 row of the first
#     configuration with it (OTHER_STEPS steps).
#  4. The other bench scripts (parallelism, checkpoints, a tensor over 2^31 elements through the
#     checkpoint I/O, recomputation, memory with
#     MEMORY_ROUNDS rounds of MEMORY_STEPS steps, MoE, context parallelism, the performance model
#     against llmscale's measurements); the Makefile runs the tokenizer's after this.
# Everything together is meant to stay under 15 minutes on 2 cores: PyTorch is 5-20x slower per
# step than llmtrain here, so it runs fewer steps (the last field of CONFIGS).
# Writes build/bench/results.md (and gemm_*.txt, the runs' logs). Settings (environment):
# THREADS (2), STEPS (12; llmtrain steps of the T <= 256 configurations), LONG_STEPS (5; T = 1024),
# OTHER_STEPS (6), GEMM_REPS (5), MEMORY_ROUNDS (1), MEMORY_STEPS (6), CONFIGS, PRECISIONS
# ("fp32 bf16"; "bf16-fp32w" is bf16 with &train weights_storage = 'fp32', the weights copy as
# fp32 arrays of rounded values: "fp32 bf16 bf16-fp32w" measures what the 16-bit copy gains;
# "bf16-a16" is bf16 with &train activations_storage = '16bit': what the packing costs on a CPU),
# THROUGHPUT_ONLY=1 (skip part 4), OTHER_GEMM=0 (skip part 3). OPENBLAS_CORETYPE is
# used as the environment has it; where it is unset, OpenBLAS rows are measured with its default
# and with SkylakeX kernels, and PyTorch (which uses OpenBLAS for fp32) runs with SkylakeX, its
# faster setting on this CPU.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}" "${THREADS:=2}" "${STEPS:=12}"
: "${LONG_STEPS:=5}" "${OTHER_STEPS:=6}" "${GEMM_REPS:=5}" "${PRECISIONS:=fp32 bf16}" "${OTHER_GEMM:=1}"
: "${MEMORY_ROUNDS:=1}" "${MEMORY_STEPS:=6}"
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

START=$(date +%s) LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
progress() { local s=$(($(date +%s) - START)); printf '[bench %2d:%02d] %s\n' $((s / 60)) $((s % 60)) "$*"; }
fail() { echo "run_bench: $*"; exit 1; }

# name, L, C, NH, T, B, llmtrain steps, PyTorch steps (torch_gpt.py leaves out the first 2 of
# more than 4 steps, else the first one)
: "${CONFIGS:=gpt2-124m,12,768,12,64,4,$STEPS,4 gpt2-124m,12,768,12,1024,1,$LONG_STEPS,3 small,4,256,4,256,8,$STEPS,4}"
PT_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
with_coretype() { # coretype command...: env = as the environment has it
    local ct=$1; shift
    case $ct in env) "$@" ;; default) env -u OPENBLAS_CORETYPE "$@" ;; *) OPENBLAS_CORETYPE=$ct "$@" ;; esac
}
coretype_label() { # library coretype: "onednn" or "cblas, OpenBLAS kernels <as set>"
    [ "$1" = onednn ] && { echo onednn; return; }
    case $2 in env) echo "$1, OpenBLAS kernels ${OPENBLAS_CORETYPE:-default}" ;; *) echo "$1, OpenBLAS kernels $2" ;; esac
}
gemm_of() { # makefile dir: the GEMM library that tree builds with (Makefile.inc's choice)
    make --no-print-directory -s -C "$1" -f Makefile -f - print-gemm <<'MK' 2>/dev/null
print-gemm: ; @echo $(GEMM)
MK
}
MAIN_GEMM=$(gemm_of .)
BF16_CPU=no
grep -qw avx512_bf16 /proc/cpuinfo && BF16_CPU="AVX512_BF16"
grep -qw amx_bf16 /proc/cpuinfo && BF16_CPU="AMX-BF16"

# ---- 1. GEMM rates on a configuration's shapes (run in part 2, before its rows) ----------------
gemm_rates() { # bench_gemm tag coretype L C N: writes $OUT/gemm_<tag>.txt, sets BEST_OF FAST_OF BF16_OF
    local bin=$1 tag=$2 ct=$3
    with_coretype $ct env OMP_NUM_THREADS=$THREADS $bin $4 $5 $6 50257 $GEMM_REPS >$OUT/gemm_$tag.txt 2>&1 ||
        { cat $OUT/gemm_$tag.txt; fail "bench_gemm failed"; }
    BEST_OF[$tag]=$(awk '/^total:/ {print $7}' $OUT/gemm_$tag.txt)
    BF16_OF[$tag]=$(awk '/^total:/ {print $9}' $OUT/gemm_$tag.txt)
    FAST_OF[$tag]=$(awk '/^fastest:/ {print $7}' $OUT/gemm_$tag.txt)
    FAST_BF16_OF[$tag]=$(awk '/^fastest:/ {print $9}' $OUT/gemm_$tag.txt)
}
gemm_section() { # title tag: bench_gemm's table into the report
    { echo "**$1** ($(sed -n 's/^library: //p' $OUT/gemm_$2.txt)): $(sed -n 's/^GEMM rates (GFLOP\/s), //p' $OUT/gemm_$2.txt)"
      echo; grep '^|' $OUT/gemm_$2.txt; echo; } >>$GEMM_MD
}
declare -A BEST_OF BF16_OF FAST_OF FAST_BF16_OF
GEMM_MD=$OUT/gemm.md
: >$GEMM_MD
# The main build's rates for one configuration, measured just before its training rows so that
# both see the same load on a shared machine.
main_gemm_rates() { # name L C T B
    local tag=$1_T$4_$MAIN_GEMM
    [ -n "${BEST_OF[$tag]:-}" ] && return
    progress "GEMM rates: $1 L=$2 C=$3, N = $5 x $4 = $(($5 * $4)) rows ($MAIN_GEMM)"
    gemm_rates build/bench/bench_gemm $tag env $2 $3 $(($5 * $4))
    grep '^| \*\*total' $OUT/gemm_$tag.txt
    gemm_section "$1, T=$4 B=$5" $tag
}

# ---- 2. training throughput ------------------------------------------------------------------
write_nml() { # file run-name L C NH T B steps precision (bf16-fp32w: bf16, fp32-array weights;
               # bf16-a16: bf16, activations in 16-bit storage)
    local prec=${9%%-*} storage=auto acts=auto
    case $9 in *-fp32w) storage=fp32 ;; *-a16) acts=16bit ;; esac
    cat >$1 <<NML
&run name = '$2', out_dir = '$OUT' /
&model n_layer = $3, n_head = $5, d_model = $4, vocab_size = 50257, seq_len = $6 /
&train max_steps = $8, micro_batch = $7, lr = 6e-4, warmup_steps = 0, precision = '$prec',
       weights_storage = '$storage', activations_storage = '$acts' /
&data train_files = 'data/bench/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log every = 1 /
NML
}
# llmtrain program run coretype: sets TOK (median) TOK_MAX (fastest step) GFLOPS GFLOPS_MAX
# FAULTS_STEP FAULTS_RUN
run_llmtrain() {
    local prog=$1 run=$2 ct=$3 nml=$OUT/$2.nml
    with_coretype $ct env OMP_NUM_THREADS=$THREADS /usr/bin/time -f %R -o $OUT/$run.faults \
        $MPIRUN -np 1 --bind-to none $prog $nml >$OUT/$run.log 2>&1 ||
        { tail -20 $OUT/$run.log; fail "llmtrain failed ($OUT/$run.log)"; }
    read -r TOK TOK_MAX FAULTS_STEP <<<"$($PYTHON - $OUT/$run/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
steady = rows[2:] if len(rows) > 4 else rows  # the first steps pay page faults and warm-up
tok = [r["tokens_per_s"] for r in steady]
f = [r["minor_faults"] for r in steady if "minor_faults" in r]
print("%.1f %.1f %s" % (statistics.median(tok), max(tok), "%.0f" % statistics.median(f) if f else "n/a"))
PY
)"
    FAULTS_RUN=$(tail -1 $OUT/$run.faults)
    local fpt
    fpt=$(grep -o '[0-9.]* GFLOP per token' $OUT/$run.log | awk '{print $1}')
    GFLOPS=$(awk -v t="$TOK" -v f="$fpt" 'BEGIN {printf "%.1f", t * f}')
    GFLOPS_MAX=$(awk -v t="$TOK_MAX" -v f="$fpt" 'BEGIN {printf "%.1f", t * f}')
}
# PyTorch: sets PT_TOK PT_TOK_MAX PT_FAULTS PT_MALLOC. The first time with both malloc settings (glibc's
# default, and hugetlb=1: large blocks on transparent huge pages, far fewer page faults), keeping
# the better; later rows with the better one only (PyTorch is the slow part of this benchmark).
PT_BEST_MALLOC=""
run_torch() { # L C NH T B steps dtype
    PT_TOK=0 PT_TOK_MAX=0 PT_FAULTS=n/a PT_MALLOC=""
    local tun tuns r tok tmax flt
    tuns=${PT_BEST_MALLOC:-"default glibc.malloc.hugetlb=1"}
    for tun in $tuns; do
        r=$(with_coretype $PT_CORETYPE env GLIBC_TUNABLES=${tun#default} $PYTHON validation/bench/torch_gpt.py \
            --layers $1 --d-model $2 --heads $3 --seq $4 --batch $5 --steps $6 --threads $THREADS \
            --dtype $7) || fail "torch_gpt.py failed"
        read -r tok tmax flt <<<"$(echo "$r" | $PYTHON -c 'import json,sys; d = json.load(sys.stdin); print("%.1f %.1f %.0f" % (d["tokens_per_s"], d["fastest_tokens_per_s"], d["minor_faults_per_step"]))')"
        echo "   pytorch $7 (malloc $tun): $tok tok/s (fastest step $tmax), $flt minor faults/step"
        if awk -v a="$PT_TOK" -v b="$tok" 'BEGIN {exit !(b > a)}'; then
            PT_TOK=$tok PT_TOK_MAX=$tmax PT_FAULTS=$flt PT_MALLOC=$tun
        fi
    done
    PT_BEST_MALLOC=$PT_MALLOC
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.0f%%", 100 * a / b; else print "n/a"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }

ROWS=$OUT/throughput.md
{
    printf '| model | T | B | precision | GEMM library | llmtrain tok/s | fastest step | GFLOP/s | %% of best GEMM (fastest) | minor faults/step | minor faults, whole run | PyTorch %s tok/s | fastest step | PyTorch malloc | PyTorch faults/step | ratio |\n' \
        "$($PYTHON -c 'import torch; print(torch.__version__)')"
    printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
} >$ROWS
declare -A TOK_OF PT_OF PCT_OF RATIO_OF
lib_label() { # gemm-tag coretype: the library line of bench_gemm for it, and OPENBLAS_CORETYPE if set
    local l
    l=$(sed -n 's/^library: //p' $OUT/gemm_$1.txt | sed 's/, [a-zA-Z]* threads$//')
    case $2 in env) [ -n "${OPENBLAS_CORETYPE:-}" ] && [[ $l = OpenBLAS* ]] && l="$l (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)" ;;
               default) ;; *) l="$l (OPENBLAS_CORETYPE=$2)" ;; esac
    echo "$l"
}
# row: label name L C NH T B steps torch-steps precision program library coretype gemm-tag
throughput_row() {
    local label=$1 name=$2 L=$3 C=$4 NH=$5 T=$6 B=$7 steps=$8 pt_steps=$9 prec=${10} prog=${11} lib=${12}
    local ct=${13} tag=${14}
    local run=${name}_T${T}_${prec}_${label} key=${name}_T${T}_$prec best fast of p pf r
    local ptkey=${name}_T${T}_${prec%%-*} # PyTorch runs once per precision
    write_nml $OUT/$run.nml $run $L $C $NH $T $B $steps $prec
    progress "llmtrain $name T=$T B=$B $prec, $steps steps ($(coretype_label $lib $ct))"
    run_llmtrain $prog $run $ct
    grep -E "^step" $OUT/$run.log | tail -1
    best=${BEST_OF[$tag]} fast=${FAST_OF[$tag]} of=""
    if [ ${prec%%-*} = bf16 ] && [ "${BF16_OF[$tag]}" != n/a ]; then
        best=${BF16_OF[$tag]} fast=${FAST_BF16_OF[$tag]} of=" of bf16 GEMM"
    fi
    if [ -z "${PT_OF[$ptkey]:-}" ]; then
        progress "PyTorch $name T=$T B=$B ${prec%%-*}, $pt_steps steps (OpenBLAS kernels $PT_CORETYPE)"
        run_torch $L $C $NH $T $B $pt_steps ${prec%%-*}
        PT_OF[$ptkey]="$PT_TOK $PT_TOK_MAX $PT_FAULTS $PT_MALLOC"
    fi
    read -r PT_TOK PT_TOK_MAX PT_FAULTS PT_MALLOC <<<"${PT_OF[$ptkey]}"
    p=$(pct $GFLOPS $best) pf=$(pct $GFLOPS_MAX $fast) r=$(ratio $TOK $PT_TOK)
    [ $label = main ] && TOK_OF[$key]=$TOK PCT_OF[$key]="$p (fastest: $pf)" RATIO_OF[$key]=$r
    echo "   llmtrain: $TOK tok/s (fastest step $TOK_MAX; $GFLOPS GFLOP/s, $p of the best GEMM rate $best$of;" \
         "fastest step $pf of the fastest GEMM $fast), faults/step $FAULTS_STEP, whole run $FAULTS_RUN |" \
         "PyTorch: $PT_TOK tok/s | ratio $r"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s (%s)%s | %s | %s | %s | %s | %s | %s | %sx |\n' "$name" \
        "$T" "$B" "$prec" "$(lib_label $tag $ct)" "$TOK" "$TOK_MAX" "$GFLOPS" "$p" "$pf" "$of" "$FAULTS_STEP" \
        "$FAULTS_RUN" "$PT_TOK" "$PT_TOK_MAX" "$PT_MALLOC" "$PT_FAULTS" "$r" >>$ROWS
}
for cfg in $CONFIGS; do
    IFS=, read -r name L C NH T B steps pt_steps <<<"$cfg"
    main_gemm_rates $name $L $C $T $B
    for prec in $PRECISIONS; do
        throughput_row main $name $L $C $NH $T $B $steps $pt_steps $prec ./llmtrain $MAIN_GEMM env \
            ${name}_T${T}_$MAIN_GEMM
    done
done

# ---- 2b. the README's first command as written, beside the best launch ----------------------------
# The README's run line is `mpirun -np 1 ./llmtrain input.nml`: no binding option, no
# OMP_NUM_THREADS. It runs beside `mpirun --bind-to none -np 1` (nothing bound by the launcher:
# llmtrain binds the rank to the node's cores, one thread per core: the best launch known here)
# and `mpirun -np 1 -x OMP_NUM_THREADS=<cores>` (what HPC users type), on GPT-2 124M T=64 B=4
# fp32, alternated README_ROUNDS times (3); each run's median tokens/s over its steady steps, the
# median over the rounds.
: "${README_ROUNDS:=3}"
run_launch() { # run-name launch-args...: sets TOK (median tok/s of the run's steady steps)
    local run=$1; shift
    env -u OMP_NUM_THREADS mpirun "$@" ./llmtrain $OUT/$run.nml >$OUT/$run.log 2>&1 ||
        { tail -20 $OUT/$run.log; fail "llmtrain failed ($OUT/$run.log)"; }
    TOK=$($PYTHON - $OUT/$run/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
steady = rows[2:] if len(rows) > 4 else rows
print("%.1f" % statistics.median(r["tokens_per_s"] for r in steady))
PY
)
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
README_MD=$OUT/readme_launch.md
declare -A LAUNCH_TOKS
LAUNCH_NAMES="readme omp best"
declare -A LAUNCH_ARGS=([readme]="-np 1" [omp]="-np 1 -x OMP_NUM_THREADS=$(nproc)" [best]="--bind-to none -np 1")
for round in $(seq 1 "$README_ROUNDS"); do
    for l in $LAUNCH_NAMES; do
        write_nml $OUT/launch_$l.nml launch_$l 12 768 12 64 4 $STEPS fp32
        progress "launch $l, round $round/$README_ROUNDS: mpirun ${LAUNCH_ARGS[$l]} ./llmtrain (GPT-2 124M T=64 B=4 fp32, $STEPS steps)"
        # shellcheck disable=SC2086
        run_launch launch_$l ${LAUNCH_ARGS[$l]}
        LAUNCH_TOKS[$l]="${LAUNCH_TOKS[$l]:-} $TOK"
        echo "   $TOK tok/s; $(grep -m1 '^  cores:' $OUT/launch_$l.log | sed 's/^ *//')"
    done
done
declare -A LAUNCH_MED
{
    echo "| launch | tokens/s per round | median | cores per rank, and why (llmtrain's summary) |"
    echo "|---|---|---|---|"
    for l in $LAUNCH_NAMES; do
        LAUNCH_MED[$l]=$(echo ${LAUNCH_TOKS[$l]} | median)
        echo "| \`mpirun ${LAUNCH_ARGS[$l]} ./llmtrain\` | ${LAUNCH_TOKS[$l]# } | ${LAUNCH_MED[$l]} | $(grep -m1 '^  cores:' $OUT/launch_$l.log | sed 's/^ *cores: //') |"
    done
} >$README_MD
cat $README_MD

# ---- 2c. llm.c's train_gpt2.c on the same model (when a checkout is given) -------------------------
# llm.c (github.com/karpathy/llm.c) is in neither Debian's nor PyPI's packages, the only registries
# this machine reaches, so it is measured only where LLMC_DIR names a checkout of it: its
# train_gpt2.c built as its Makefile builds it (-Ofast -march=native -fopenmp -DOMP), on the same
# model (GPT-2 124M, its B = 4, T = 64), inputs from validation/bench/llmc_inputs.py (random
# weights in its model-file format, this benchmark's tokens), THREADS OpenMP threads; the median of
# its reported step times over steps 1..LLMC_STEPS (6), then it is stopped.
: "${LLMC_STEPS:=6}"
LLMC_TOK="" LLMC_WHY="LLMC_DIR is not set (llm.c is in neither Debian's nor PyPI's packages): set LLMC_DIR to a checkout of github.com/karpathy/llm.c"
if [ -n "${LLMC_DIR:-}" ]; then
    if [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then
        LLMC_WHY="LLMC_DIR=$LLMC_DIR has no train_gpt2.c"
    else
        d=$OUT/llmc && rm -rf $d && mkdir -p $d
        v=1 && grep -q 'model_header\[1\] != 3' "$LLMC_DIR/train_gpt2.c" && v=3
        progress "llm.c: building $LLMC_DIR/train_gpt2.c (model file version $v) and its inputs in $d"
        if ! gcc -O3 -Ofast -march=native -fopenmp -DOMP -I"$LLMC_DIR" -I"$LLMC_DIR/llmc" \
                "$LLMC_DIR/train_gpt2.c" -lm -o $d/train_gpt2 >$d/build.log 2>&1; then
            LLMC_WHY="train_gpt2.c did not build ($d/build.log: $(tail -1 $d/build.log))"
        elif ! $PYTHON validation/bench/llmc_inputs.py data/bench/train_000.bin $d $v; then
            LLMC_WHY="llmc_inputs.py failed"
        else
            progress "llm.c: train_gpt2 ($THREADS threads) until step $LLMC_STEPS"
            (cd $d && OMP_NUM_THREADS=$THREADS timeout 1200 ./train_gpt2 >run.log 2>&1) &
            pid=$!
            while kill -0 $pid 2>/dev/null && [ "$(grep -c '^step [0-9]*: train loss' $d/run.log 2>/dev/null)" -le "$LLMC_STEPS" ]; do sleep 2; done
            kill $pid 2>/dev/null; pkill -f "$d/train_gpt2" 2>/dev/null; wait $pid 2>/dev/null
            ms=$(awk -v n="$LLMC_STEPS" '/^step [0-9]+: train loss/ {s = $2 + 0; if (s >= 1 && s <= n) {gsub(/[()]/, ""); print $(NF - 1)}}' $d/run.log | median)
            if [ -n "$ms" ]; then
                LLMC_TOK=$(awk -v ms="$ms" 'BEGIN {printf "%.1f", 4 * 64 * 1000 / ms}')
                echo "   llm.c train_gpt2: median step $ms ms = $LLMC_TOK tok/s ($(grep -c '^step' $d/run.log) steps run)"
            else
                LLMC_WHY="train_gpt2 printed no step times ($d/run.log: $(tail -1 $d/run.log))"
            fi
        fi
    fi
fi
[ -n "$LLMC_TOK" ] || echo "   llm.c: not measured: $LLMC_WHY"

# ---- 3. the other GEMM library: a second build, the fp32 124M T=64 row -------------------------
if [ "$OTHER_GEMM" = 1 ]; then
    OTHER=cblas
    [ "$MAIN_GEMM" = cblas ] && OTHER=onednn
    tree=$OUT/$OTHER-tree
    progress "building llmtrain with GEMM = $OTHER in $tree"
    # cp -a keeps the files' times, so a second make bench rebuilds only what changed
    mkdir -p $tree/validation/bench && rm -rf $tree/src &&
        cp -a src Makefile Makefile.inc $tree/ && cp -a validation/bench/bench_gemm.c $tree/validation/bench/
    if make --no-print-directory -s -C $tree -j$THREADS GEMM=$OTHER llmtrain build/bench/bench_gemm \
            >$OUT/$OTHER-build.log 2>&1; then
        cfg=$(tr ' ' '\n' <<<"$CONFIGS" | head -1)
        IFS=, read -r name L C NH T B steps pt_steps <<<"$cfg"
        for lib in $OTHER $MAIN_GEMM; do
            if [ $lib = cblas ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then cts="default SkylakeX"; else cts=env; fi
            for ct in $cts; do
                [ $lib = $MAIN_GEMM ] && [ $ct = env ] && continue # measured in part 2
                if [ $lib = $MAIN_GEMM ]; then prog=./llmtrain gemm=build/bench/bench_gemm; else prog=$tree/llmtrain gemm=$tree/build/bench/bench_gemm; fi
                tag=${name}_T${T}_${lib}_$ct
                progress "GEMM rates: $name N = $((B * T)) rows ($(coretype_label $lib $ct))"
                gemm_rates $gemm $tag $ct $L $C $((B * T))
                grep '^| \*\*total' $OUT/gemm_$tag.txt
                gemm_section "$name, T=$T B=$B, $(coretype_label $lib $ct)" $tag
                throughput_row ${lib}_$ct $name $L $C $NH $T $B $OTHER_STEPS $pt_steps fp32 $prog $lib $ct $tag
            done
        done
    else
        progress "GEMM = $OTHER does not build here (its library is not installed?): $OUT/$OTHER-build.log"
        tail -3 $OUT/$OTHER-build.log
    fi
fi

# ---- targets (the issue's), judged on this run's numbers --------------------------------------
targets() {
    local first name L C NH T B steps pt_steps f32 b16 p r
    first=$(tr ' ' '\n' <<<"$CONFIGS" | head -1)
    IFS=, read -r name L C NH T B steps pt_steps <<<"$first"
    p=${PCT_OF[${name}_T${T}_fp32]:-n/a} r=${RATIO_OF[${name}_T${T}_fp32]:-n/a}
    echo "- fp32 $name T=$T B=$B: $p of the best GEMM rate (target >= 75%):" \
         "$(awk -v p="${p%%%*}" 'BEGIN {print (p >= 75) ? "met" : "not met"}');" \
         "${r}x PyTorch (target >= 3x): $(awk -v r="$r" 'BEGIN {print (r >= 3) ? "met" : "not met"}')"
    r=$(ratio "${LAUNCH_MED[readme]}" "${LAUNCH_MED[best]}")
    echo "- the README's first command as written (\`mpirun -np 1 ./llmtrain\`) / the best launch known" \
         "(\`mpirun --bind-to none -np 1\`: llmtrain binds), GPT-2 124M T=64 B=4 fp32, medians of $README_ROUNDS" \
         "alternated rounds: ${LAUNCH_MED[readme]} / ${LAUNCH_MED[best]} tok/s = ${r}x (target >= 0.95x):" \
         "$(awk -v r="$r" 'BEGIN {print (r >= 0.95) ? "met" : "not met"}')"
    if [ -n "$LLMC_TOK" ]; then
        r=$(ratio "${TOK_OF[${name}_T${T}_fp32]:-0}" "$LLMC_TOK")
        echo "- fp32 $name T=$T B=$B: ${r}x llm.c's train_gpt2.c ($LLMC_TOK tok/s, $THREADS threads; target >= 3x):" \
             "$(awk -v r="$r" 'BEGIN {print (r >= 3) ? "met" : "not met"}')"
    else
        echo "- llm.c's train_gpt2.c (target >= 3x): not measured: $LLMC_WHY"
    fi
    for cfg in $CONFIGS; do
        IFS=, read -r name L C NH T B steps pt_steps <<<"$cfg"
        f32=${TOK_OF[${name}_T${T}_fp32]:-} b16=${TOK_OF[${name}_T${T}_bf16]:-}
        [ -n "$b16" ] || continue
        r=$([ -n "$f32" ] && ratio $b16 $f32)
        [ -n "$r" ] && echo "- bf16 / fp32 tokens/s, $name T=$T B=$B: ${r}x (target >= 1.7x where the CPU has bf16" \
             "instructions; this CPU: $BF16_CPU): $(awk -v r="$r" -v c="$BF16_CPU" 'BEGIN {print (c == "no") ? "not applicable" : (r >= 1.7) ? "met" : "not met"}')"
        w32=${TOK_OF[${name}_T${T}_bf16-fp32w]:-}
        [ -n "$w32" ] && echo "- bf16 with the weights copy in 16-bit storage / as fp32 arrays (weights_storage" \
            "'auto' / 'fp32'; 16-bit only where the products are native), $name T=$T B=$B: $(ratio $b16 $w32)x"
        a16=${TOK_OF[${name}_T${T}_bf16-a16]:-}
        [ -n "$a16" ] && echo "- bf16 with the saved activations in 16-bit storage / as fp32 arrays" \
            "(activations_storage '16bit' / 'auto', fp32 arrays on a CPU: the packing passes' cost)," \
            "$name T=$T B=$B: $(ratio $a16 $b16)x"
    done
}
{
    echo "# make bench, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $THREADS threads"
    echo
    echo "Load average (1, 5, 15 min) at the start: $LOAD_START; now: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "(above $(nproc), other work shared the cores and the times are noisy)."
    echo
    echo "## GEMM rates on the model's shapes (GFLOP/s)"
    echo
    cat $GEMM_MD
    echo "## Training throughput ($THREADS threads; medians over the steps after the first two)"
    echo
    cat $ROWS
    echo
    echo "% of best GEMM: achieved GFLOP/s (median step) over the better of the 'ops' and 'raw' totals"
    echo "above (medians), same shapes, measured just before; in brackets the fastest step over the"
    echo "better total of the fastest repetitions, which a shared machine disturbs less. Over 100%: the"
    echo "load from other work changed between the two measurements. bf16 rows: of the bf16 GEMM where"
    echo "there is one, else of fp32."
    echo "PyTorch: OpenBLAS kernels $PT_CORETYPE; malloc: the better of glibc's default and"
    echo "glibc.malloc.hugetlb=1 on the first row, that one for the others."
    echo "Minor faults per step: metrics.jsonl 'minor_faults' (n/a: this llmtrain does not write it);"
    echo "whole run: /usr/bin/time %R of mpirun and llmtrain, start-up included."
    echo
    echo "## The README's first command beside the best launch (GPT-2 124M, T=64, B=4, fp32)"
    echo
    cat $README_MD
    echo
    echo "## Targets"
    echo
    targets
} >$OUT/results.md
echo
cat $OUT/results.md
progress "throughput part done"
[ "${THROUGHPUT_ONLY:-0}" = 1 ] && exit 0
echo
progress "parallelism measurements (validation/bench/pipeline_bench.sh)"
bash validation/bench/pipeline_bench.sh
echo
progress "checkpoints of GPT-2 124M on tp 2 x pp 2 and dp 4 ZeRO-3: write vs dd, async stall, load, peak memory (validation/bench/checkpoint_bench.sh)"
bash validation/bench/checkpoint_bench.sh
echo
progress "one tensor over 2^31 elements written and read back (validation/bench/big_tensor_bench.sh)"
bash validation/bench/big_tensor_bench.sh
echo
progress "activation recomputation (validation/bench/recompute_bench.sh)"
bash validation/bench/recompute_bench.sh
echo
progress "ZeRO x recomputation memory and step time, largest model per 16 GiB (validation/bench/memory_bench.sh)"
ROUNDS=$MEMORY_ROUNDS STEPS=$MEMORY_STEPS bash validation/bench/memory_bench.sh
echo
progress "Mixture-of-Experts: dense vs MoE step time, memory vs ep, load balance (validation/bench/moe_bench.sh)"
bash validation/bench/moe_bench.sh
echo
progress "context parallelism at seq_len 4096: cp 1, 2, 4 (validation/bench/cp_bench.sh)"
bash validation/bench/cp_bench.sh
echo
progress "the performance model against llmscale's measurements (validation/bench/perf_model_bench.sh)"
bash validation/bench/perf_model_bench.sh
progress "run_bench.sh done"
