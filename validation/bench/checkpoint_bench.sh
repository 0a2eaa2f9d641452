#!/usr/bin/env bash
# checkpoint_bench.sh — part of `make bench`: checkpoints of GPT-2 124M with its AdamW state on
# two grids of 4 ranks (tp 2 x pp 2 with ZeRO-1; dp 4 with ZeRO-3), side by side in one run:
#   - the write rate of a synchronous save against dd of the same bytes on the same file system
#     (fdatasync; the save ends with H5Fflush, an fsync under MPI-IO): target >= 0.8x;
#   - the stall of a periodic save (`stall_s`: what the step that saves waits) with
#     &checkpoint async = .true. as a fraction of the synchronous save's: target <= 0.1;
#   - the load rate (a resume of the final checkpoint: `resume_load_s`);
#   - the largest resident size of any rank during the save, the load and training before
#     (`save_peak_rss_mib`, `load_peak_rss_mib`, `train_peak_rss_mib`), and the staging buffer.
# Each run: max_steps = 4, a periodic save at step 2 (the measured one) and the final, synchronous
# one at step 4; the synchronous run is then resumed for one step. Writes build/bench/checkpoint.md
# (the page part "Checkpoints") and the logs beside it.
# Settings (environment): CKPT_LAYERS (12), CKPT_D_MODEL (768), CKPT_HEADS (12): the model;
# CKPT_GRIDS (tp2pp2 dp4z3): which grids.
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
: "${CKPT_LAYERS:=12}" "${CKPT_D_MODEL:=768}" "${CKPT_HEADS:=12}" "${CKPT_GRIDS:=tp2pp2 dp4z3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT=build/bench
D=$OUT/ckpt
mkdir -p $OUT data/bench
[ -f data/bench/train_000.bin ] || bash validation/bench/run_bench.sh --data-only
rm -rf $D
mkdir -p $D

grid_keys() { # name: the &parallel group of a grid
    case $1 in
        tp2pp2) echo "tp = 2, pp = 2, zero_stage = 1" ;;
        dp4z3) echo "dp = 4, zero_stage = 3" ;;
        *) echo "checkpoint_bench: unknown grid '$1' in CKPT_GRIDS (tp2pp2, dp4z3)" >&2; exit 2 ;;
    esac
}

run() { # grid mode(sync|async) steps: one run in $D/<grid>_<mode>, resumed where it stopped
    local g=$1 mode=$2 steps=$3 dir=$D/$1_$2 async=.false.
    [ "$mode" = async ] && async=.true.
    mkdir -p $dir
    cat >$dir/run.nml <<NML
&run name = 'ckpt', out_dir = '$dir' /
&model n_layer = $CKPT_LAYERS, n_head = $CKPT_HEADS, d_model = $CKPT_D_MODEL, vocab_size = 50257, seq_len = 64 /
&parallel $(grid_keys $g) /
&train max_steps = $steps, micro_batch = 1, global_batch = 4 /
&data train_files = 'data/bench/train_*.bin' /
&checkpoint every = 2, resume = 'auto', save_weights = .false., async = $async, keep = 1 /
&log every = 1 /
NML
    $MPIRUN -np 4 ./llmtrain $dir/run.nml >>$dir/log 2>&1 || { tail $dir/log; exit 1; }
}

raw_rate() { # bytes: MiB/s of dd writing that many bytes with fdatasync
    local t0 t1
    sync
    t0=$(date +%s.%N)
    dd if=/dev/zero of=$D/raw.bin bs=4M count=$(($1 / 4194304 + 1)) conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f $D/raw.bin
    awk -v b=$1 -v a=$t0 -v c=$t1 'BEGIN {printf "%.1f", b / 1048576 / (c - a)}'
}

for g in $CKPT_GRIDS; do
    grid_keys $g >/dev/null || exit 2
    echo "checkpoint_bench: $g synchronous, then resumed"
    run $g sync 4
    f=$(ls $D/${g}_sync/ckpt/ckpt_step*.h5 | tail -1)
    bytes=$(stat -c %s $f)
    run $g sync 5
    echo "checkpoint_bench: $g asynchronous"
    run $g async 4
    echo "checkpoint_bench: dd of the same $bytes bytes"
    echo "$g $bytes $(raw_rate $bytes)" >>$D/raw.txt
done

$PYTHON - $D $CKPT_LAYERS $CKPT_D_MODEL >$OUT/checkpoint.md <<'PY' || exit 1
import json, os, statistics, sys
d, layers, cm = sys.argv[1], sys.argv[2], sys.argv[3]
names = {"tp2pp2": "tp 2 × pp 2, ZeRO-1", "dp4z3": "dp 4, ZeRO-3"}

def records(grid, mode):
    p = os.path.join(d, "%s_%s" % (grid, mode), "ckpt", "metrics.jsonl")
    return [json.loads(l) for l in open(p)]

def save_at(rows, step):
    s = [r for r in rows if r.get("checkpoint") and r["step"] == step]
    if not s:
        sys.exit("checkpoint_bench: no checkpoint record at step %d" % step)
    return s[-1]

rows, checks = [], []
for line in open(os.path.join(d, "raw.txt")):
    grid, nbytes, dd = line.split()
    sync, asyn = records(grid, "sync"), records(grid, "async")
    s2, a2, s4 = save_at(sync, 2), save_at(asyn, 2), save_at(sync, 4)
    if not a2["async"] or s2["async"]:
        sys.exit("checkpoint_bench: %s: the step-2 saves are not one synchronous and one in the "
                 "background (async %s / %s)" % (grid, s2["async"], a2["async"]))
    load = [r for r in sync if "resume_load_s" in r]
    if not load:
        sys.exit("checkpoint_bench: %s: the resumed run wrote no resume_load_s record" % grid)
    load = load[-1]
    steps = [r["ms"] for r in sync if "loss" in r and "ms" in r]
    mib = int(nbytes) / 1048576
    write = statistics.median([s2["mib_per_s"], s4["mib_per_s"]])
    stall = a2["stall_s"] / s2["stall_s"]
    rows.append("| %s | %.0f | %.0f | %.0f | **%.2f** | %.3f | %.3f | **%.3f** | %.1f | %.0f | %.0f | %.0f / %.0f | %.0f | %.0f |"
                % (names[grid], mib, write, float(dd), write / float(dd), s2["stall_s"], a2["stall_s"],
                   stall, a2["write_s"], mib / load["resume_load_s"], statistics.median(steps),
                   s2["save_peak_rss_mib"], a2["save_peak_rss_mib"], load["load_peak_rss_mib"],
                   s2["train_peak_rss_mib"]))
    checks.append("%s: write %.2f× dd (target ≥ 0.8: %s); stall %.3f× the synchronous save's "
                  "(target ≤ 0.1: %s); peak during the save %.0f MiB vs %.0f MiB in training "
                  "(%+.0f MiB, staging %.0f MiB)"
                  % (names[grid], write / float(dd), "met" if write / float(dd) >= 0.8 else "NOT met",
                     stall, "met" if stall <= 0.1 else "NOT met", s2["save_peak_rss_mib"],
                     s2["train_peak_rss_mib"], s2["save_peak_rss_mib"] - s2["train_peak_rss_mib"],
                     s2["staging_mib"]))

print("GPT-2 (%s layers, d_model %s, vocabulary 50257, seq_len 64) with its AdamW state, 4 ranks, "
      "saved at step 2 (measured) and 4 (final) of 4, then resumed from step 4. Write rate: median "
      "of the two synchronous saves; dd: the same bytes with fdatasync, in the same run; stall: "
      "the step-2 save's wait with `async = .true.` over the synchronous one's; peak memory: the "
      "largest resident size of any rank.\n" % (layers, cm))
print("| grid | file MiB | write MiB/s | dd MiB/s | write / dd | sync stall s | async stall s "
      "| async / sync | background write s | load MiB/s | step ms | save peak MiB sync / async "
      "| load peak MiB | train peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print()
for c in checks:
    print("- " + c)
PY
cat $OUT/checkpoint.md
