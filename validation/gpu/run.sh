#!/usr/bin/env bash
# run.sh OUTDIR — the CUDA backend's validation on one GPU, in one short run (README.md here has the
# recipe). Uses build-gpu/ as bundle.sh built it on the build machine (portable ISA), else
# build-cuda/ (or builds that here when the toolkit and the libraries' headers are present), and
# the libraries of .gpu-bundle/ (bundle.sh). Steps, each with a
# time limit; the summary table is printed last and written to OUTDIR/summary.txt:
#   1. the GPU table as llmtrain prints it (gpu/device_probe)
#   2. every op, CUDA against the CPU backend (gpu/test_cuda_ops; tolerances in its header)
#   3. 20 steps of the tiny model, device = 'cuda' against device = 'cpu' (loss curves, rel 1e-3);
#      3b. bf16 on the GPU with the activations in 16-bit storage against fp32 arrays (rel 1e-5)
#   4. PyTorch on this GPU: GPT-2 124M and 350M, T = 1024, bf16, eager
#   5. llmtrain GPT-2 124M / 350M, T = 1024, bf16: tokens/s, MFU, the ratio to PyTorch eager
#   6. PyTorch with torch.compile on the same two
# The whole run keeps to LLMT_GPU_BUDGET_S (480 s) and the table is on disk after every row.
# LLMT_GPU_REHEARSAL=1: the same script on a build machine without a GPU (validation/e2e/
# gpu_rehearsal.sh runs it in make check): the CPU build's ./llmtrain with device = 'cpu' where
# 'cuda' would be, tiny shapes in steps 4 and 5, PyTorch on the CPU, the GPU-only binaries
# skipped. It proves the plumbing (namelists, the parsing of the records, the table) so that the
# one GPU run is not spent on a typo; it says nothing about the GPU.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: validation/gpu/run.sh OUTDIR}
mkdir -p "$OUT"
# the bundle's libraries (bundle.sh) are for llmtrain only: Python keeps the machine's own (PyTorch
# next to a Debian libssl or libgomp first in the path need not load)
SYS_LD=${LD_LIBRARY_PATH-}
[ -f .gpu-bundle/env.sh ] && source .gpu-bundle/env.sh
py() { LD_LIBRARY_PATH=$SYS_LD "$PY" "$@"; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
PY=${PYTHON:-python3}
# The table, rewritten after each row: a run stopped from outside (the device tool's limit) still
# leaves what it measured. LLMT_GPU_BUDGET_S (default 480): every step's own time limit is cut
# to what is left of it, so the whole run ends inside the budget whatever hangs.
BUDGET=${LLMT_GPU_BUDGET_S:-480}
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
summary=()
row() {
    summary+=("$(printf '%-44s %s' "$1" "$2")")
    { echo "== CUDA backend validation ($(date -u +%FT%TZ), $(hostname), ${gpu_name:-no nvidia-smi})"
      printf '%s\n' "${summary[@]}"; } >"$OUT/summary.txt"
}
limit() { # SECONDS: the step's own limit, or what is left of the budget (at least 1)
    local left=$((BUDGET - SECONDS))
    [ $left -lt 1 ] && left=1
    echo $(($1 < left ? $1 : left))
}
if [ "${LLMT_GPU_REHEARSAL:-0}" = 1 ]; then
    B=build-cuda LLMT=./llmtrain GPU=cpu TORCH_DEV=cpu SEQ=64 BATCH=2 VOCAB=512 TORCH_VOCAB=512
    MODELS=("124M 2 64 4" "350M 2 128 4") # the labels stay, the shapes are tiny
    row "REHEARSAL (no GPU: device = 'cpu', tiny shapes)" "plumbing only"
else
    # bundle.sh's portable build (build-gpu/) when it came along, else build-cuda/ (made here if
    # the toolkit and the libraries' headers are present)
    B=build-cuda
    [ -x build-gpu/llmtrain ] && B=build-gpu
    LLMT=$B/llmtrain GPU=cuda TORCH_DEV=cuda SEQ=1024 BATCH=8 VOCAB=50257 TORCH_VOCAB=50304 # as llmtrain pads it
    MODELS=("124M 12 768 12" "350M 24 1024 16")
    for b in $B/llmtrain $B/gpu/test_cuda_ops $B/gpu/device_probe $B/gpu/check_attn_matmul; do
        [ -x "$b" ] || timeout $(limit 300) make -j16 CUDA=1 CUDA_BUILD=$B "$b" >"$OUT/build.log" 2>&1 || true
    done
fi
skipped() { [ "$GPU" = cpu ] && row "$1" "SKIPPED (rehearsal)"; }

# 1. the GPU as llmtrain opens it
if skipped "GPU opening (device_probe)"; then :
elif timeout $(limit 60) $B/gpu/device_probe bf16 >"$OUT/device.txt" 2>&1; then row "GPU opening (device_probe)" "PASS"
else row "GPU opening (device_probe)" "FAIL (see device.txt)"; fi
[ -f "$OUT/device.txt" ] && cat "$OUT/device.txt"

# 2. every op against the CPU backend
if skipped "ops CUDA vs CPU (test_cuda_ops)"; then :
elif [ -x $B/gpu/test_cuda_ops ]; then
    timeout $(limit 180) $B/gpu/test_cuda_ops >"$OUT/ops.txt" 2>&1
    rc=$?
    cat "$OUT/ops.txt"
    row "ops CUDA vs CPU (test_cuda_ops)" "$(tail -1 "$OUT/ops.txt") (exit $rc)"
else
    row "ops CUDA vs CPU (test_cuda_ops)" "NOT BUILT (see build.log)"
fi

# 2b. attention and matmul against double-precision host loops (independent of both backends)
if skipped "attention, matmul vs float64 (check_attn_matmul)"; then :
elif [ -x $B/gpu/check_attn_matmul ]; then
    timeout $(limit 120) $B/gpu/check_attn_matmul >"$OUT/attn_matmul.txt" 2>&1
    rc=$?
    cat "$OUT/attn_matmul.txt"
    row "attention, matmul vs float64 (check_attn_matmul)" "$([ $rc -eq 0 ] && echo PASS || echo "FAIL (exit $rc)")"
else
    row "attention, matmul vs float64 (check_attn_matmul)" "NOT BUILT (see build.log)"
fi

# 3. 20 steps of the tiny model on both backends (1 rank). The trainer has never run with
#    device = 'cuda'; the build machine's device_discipline test (LLMT_DEVSIM: no host access to
#    device memory, every group's floats through a transport as with NCCL) is what says it should.
[ -f data/tiny/train_000.bin ] || timeout 60 env LD_LIBRARY_PATH="$SYS_LD" "$PY" validation/make_synthetic_shards.py data/tiny >/dev/null 2>&1
tiny() { # LABEL DEVICE [&train keys]: 20 steps, metrics in $OUT/tiny_LABEL
    cat >"$OUT/tiny_$1.nml" <<NML
&run name = 'tiny_$1', out_dir = '$OUT', device = '$2', seed = 1337 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&train max_steps = 20, micro_batch = 4, global_batch = 8, lr = 3e-3, min_lr = 3e-4, warmup_steps = 5
       ${3:-} /
&data train_files = 'data/tiny/train_*.bin', val_files = 'data/tiny/val_*.bin', val_every = 0 /
&log every = 1 /
NML
    timeout $(limit 120) $LLMT "$OUT/tiny_$1.nml" >"$OUT/tiny_$1.log" 2>&1
}
tiny cpu cpu; tiny cuda $GPU; rc=$?
losses() { grep -h '"loss"' "$OUT"/tiny_"$1"/metrics.jsonl 2>/dev/null | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
if [ "$rc" -ne 0 ]; then
    row "tiny 20 steps cuda vs cpu" "FAIL: device='cuda' run exit $rc ($(grep -m1 -E 'error|failed' "$OUT/tiny_cuda.log" | cut -c1-80))"
else
    verdict=$(paste <(losses cpu) <(losses cuda) | awk '{n++; d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r}
        END {if (n < 20) print "FAIL: " n " steps"; else printf "%s: max rel %.2e over %d steps (tol 1e-3)\n", m <= 1e-3 ? "PASS" : "FAIL", m, n}')
    row "tiny 20 steps cuda vs cpu" "$verdict"
fi
# 3b. the activations a block saves, packed to 2 bytes after its forward and unpacked before its
#     backward, against fp32 arrays of the same rounded values: the same numbers (bit-identical on
#     the CPU, activations_storage.sh; here within what the GPU's own run-to-run order allows)
tiny act16 $GPU "precision = 'bf16', activations_storage = '16bit'"; rc16=$?
tiny act32 $GPU "precision = 'bf16', activations_storage = 'fp32'"; rc=$((rc16 | $?))
if [ "$rc" -ne 0 ]; then
    row "tiny bf16 activations 16-bit vs fp32" "FAIL: exit $rc ($(grep -h -m1 -E 'error|failed' "$OUT"/tiny_act*.log | head -1 | cut -c1-80))"
else
    row "tiny bf16 activations 16-bit vs fp32" "$(paste <(losses act16) <(losses act32) | awk '{n++; d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r}
        END {if (n < 20) print "FAIL: " n " steps"; else printf "%s: max rel %.2e over %d steps (tol 1e-5)\n", m <= 1e-5 ? "PASS" : "FAIL", m, n}')"
fi

# 4. PyTorch on this GPU (eager here; torch.compile, the slowest to start, comes last)
torch_run() { # NAME LAYERS D_MODEL HEADS MODE
    local flag=$([ $5 = compile ] && echo --compile) line lim=$(limit 240) rc
    if line=$(LD_LIBRARY_PATH=$SYS_LD timeout $lim "$PY" validation/gpu/torch_gpt.py --layers "$2" --d-model "$3" --heads "$4" --seq $SEQ --batch $BATCH --vocab $TORCH_VOCAB --device $TORCH_DEV $flag 2>"$OUT/torch_$1_$5.err"); then
        echo "$line" >"$OUT/torch_$1_$5.json"
        row "PyTorch GPT-2 $1 bf16 T=$SEQ $5" "$(echo "$line" | py -c 'import json,sys; d=json.load(sys.stdin); print("%s tok/s, MFU %.1f%%" % (d["tokens_per_s"], 100 * d["mfu"]))')"
    else
        rc=$?
        [ $rc -eq 124 ] && echo "timed out after $lim s (the step's limit or the budget's rest)" >>"$OUT/torch_$1_$5.err"
        row "PyTorch GPT-2 $1 bf16 T=$SEQ $5" "FAIL ($(tail -1 "$OUT/torch_$1_$5.err" | cut -c1-80))"
    fi
}
for m in "${MODELS[@]}"; do torch_run $m eager; done

# 5. llmtrain on the same shapes: GPT-2 124M and 350M, T = 1024, batch 8, precision = 'bf16'
#    (bf16 products on tensor cores, the weights copy and the saved activations in bf16 storage;
#    the residual stream and gradients fp32, docs/cuda.md), 20 steps on the tiny data (ids < 500 of the 50257: the speed does not
#    care). tokens/s: the median of steps 6..20 (metrics.jsonl); MFU as llmtrain reports it (the
#    backend's dense bf16 peak); the ratio to PyTorch eager of step 4.
gpt() { # NAME LAYERS D_MODEL HEADS
    cat >"$OUT/gpt_$1.nml" <<NML
&run name = 'gpt_$1', out_dir = '$OUT', device = '$GPU', seed = 1 /
&model n_layer = $2, n_head = $4, d_model = $3, d_ff = $((4 * $3)), vocab_size = $VOCAB, seq_len = $SEQ /
&train max_steps = 20, micro_batch = $BATCH, global_batch = $BATCH, lr = 6e-4, warmup_steps = 2,
       precision = 'bf16', grad_clip = 1.0 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 0, save_weights = .false. /
&log every = 1 /
NML
    timeout $(limit 150) $LLMT "$OUT/gpt_$1.nml" >"$OUT/gpt_$1.log" 2>&1
}
median_of() { # FILE KEY: the median of KEY over the step records of steps >= 6
    grep -h '"step":' "$1" 2>/dev/null | awk -F'[:,]' '$2 >= 6' | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2 |
        sort -g | awk '{v[n++] = $1} END {if (n) print (n % 2 ? v[int(n/2)] : (v[n/2-1] + v[n/2]) / 2)}'
}
for m in "${MODELS[@]}"; do
    set -- $m
    if gpt "$1" "$2" "$3" "$4"; then
        tok=$(median_of "$OUT/gpt_$1/metrics.jsonl" tokens_per_s) mfu=$(median_of "$OUT/gpt_$1/metrics.jsonl" mfu)
        eager=$(grep -o '"tokens_per_s": [0-9]*' "$OUT/torch_$1_eager.json" 2>/dev/null | grep -o '[0-9]*$')
        ratio=$([ -n "$eager" ] && [ -n "$tok" ] && awk -v a="$tok" -v b="$eager" 'BEGIN {printf ", %.2fx PyTorch eager", a / b}')
        row "llmtrain GPT-2 $1 bf16 T=$SEQ" "${tok:-?} tok/s, MFU $(awk -v f="${mfu:-0}" 'BEGIN {printf "%.1f", 100 * f}')%$ratio"
    else
        row "llmtrain GPT-2 $1 bf16 T=$SEQ" "FAIL: exit $? ($(grep -m1 -E 'error|failed' "$OUT/gpt_$1.log" | cut -c1-80))"
    fi
done

gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
# 6. torch.compile, last: its compilation may take what is left of the budget
for m in "${MODELS[@]}"; do torch_run $m compile; done
echo "== run.sh: $SECONDS s of the ${BUDGET} s budget"
cat "$OUT/summary.txt"
