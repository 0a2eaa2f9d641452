#!/usr/bin/env bash
# Bad data and impossible sizes are refused, never trained on (2 ranks): each case ends with exit
# code 2 within 60 s, exactly one "llmtrain: error" line that names the file / position / key, and
# no crash or MPI abort banner. Cases: a token id = vocab_size (the padding range) and one of
# 65535 in a shard, vocab_size = 2147483521, a shard shorter than a window among good ones, val_files
# missing or matching nothing while val_every > 0, micro_batch * seq_len beyond 32 bits,
# timeout_s = 1e-12, bucket_mb = 1e30, dp * tp * pp beyond 32 bits, a nanoGPT raw file without
# &data format (refused with the hint) and with format = 'nanogpt' (trains, exit 0).
# LLMTRAIN=/path/to/llmtrain runs another binary (e.g. an older build, to see which cases it
# gets wrong); every case runs, the failures are listed at the end.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
ulimit -v 8388608 # 8 GiB per process: a binary that tries a huge allocation fails instead of swapping
: "${LLMTRAIN:=./llmtrain}"
failed=()
bad() { echo "FAIL: $*"; failed+=("$1"); }

check_case() { # name expected-substring nml-file [np]
    local name=$1 want=$2 nml=$3 np=${4:-2} rc n
    timeout 60 $MPIRUN -np "$np" "$LLMTRAIN" "$nml" >"$TEST_DIR/$name.out" 2>"$TEST_DIR/$name.err"
    rc=$?
    if [ $rc -ne 2 ]; then tail -3 "$TEST_DIR/$name.err"; bad "$name" "exit code $rc, expected 2"; return; fi
    if ! grep -qF -- "$want" "$TEST_DIR/$name.err"; then
        cat "$TEST_DIR/$name.err"; bad "$name" "message lacks '$want'"; return
    fi
    n=$(grep -c "llmtrain: error" "$TEST_DIR/$name.err")
    if [ "$n" -ne 1 ]; then cat "$TEST_DIR/$name.err"; bad "$name" "$n error lines, expected exactly 1"; return; fi
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked|internal invariant" "$TEST_DIR/$name.err"; then
        bad "$name" "crash/abort banner"; return
    fi
    echo "ok  $name: $(grep 'llmtrain: error' "$TEST_DIR/$name.err")"
}

g=$TEST_DIR
# The tiny model (vocab_size = 500, padded to 512; seq_len = 32), 3 steps, on prepared shards;
# one run directory per case (a binary that trained on bad data must not block the next case).
write_tiny_nml $g/good.nml dp=2 gb=8 max_steps=3
nml_with() { # out-file sed-expression...: good.nml edited, &run name = the file's base name
    local out=$1; shift
    local args=(-e "s/name = 'tiny'/name = '$(basename "$out" .nml)'/") e
    for e in "$@"; do args+=(-e "$e"); done
    sed "${args[@]}" $g/good.nml >"$out"
}

# Shards: good ones, one with id 500 (= vocab_size: a masked padding logit) at position 1234, one
# with id 65535 at 777, one of 20 tokens (< seq_len + 1 = 33), and nanoGPT's raw train.bin.
$PYTHON - "$g" <<'PY'
import numpy as np, sys
d = sys.argv[1]
def shard(path, tok):
    h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, len(tok)
    open(path, "wb").write(h.tobytes() + np.asarray(tok, np.uint16).tobytes())
tok = np.fromfile("data/tiny/train_000.bin", np.uint16)[512:]  # the tokens after the header
for i in range(2): shard(f"{d}/good_{i}.bin", tok[i * 4000:(i + 1) * 4000])
t = tok[:4000].copy(); t[1234] = 500; shard(f"{d}/pad_0.bin", t)
t = tok[:4000].copy(); t[777] = 65535; shard(f"{d}/big_0.bin", t)
shard(f"{d}/good_2.bin", tok[:20])
tok[:90000].tofile(f"{d}/train.bin")  # nanoGPT: np.uint16 tokens, no header
tok[90000:].tofile(f"{d}/val.bin")
PY

# 1. token ids >= vocab_size in a shard
nml_with $g/pad.nml "s|data/tiny/train_\*.bin|$g/pad_0.bin|"
check_case token_in_padding_range "pad_0.bin: token 500 at position 1234 (token index in the shard) is >= &model vocab_size = 500" $g/pad.nml
nml_with $g/big.nml "s|data/tiny/train_\*.bin|$g/good_0.bin $g/big_0.bin|"
check_case token_65535 "big_0.bin: token 65535 at position 777 (token index in the shard) is >= &model vocab_size = 500" $g/big.nml
# 2. a vocabulary whose padded size (a multiple of 128) is not a 32-bit integer
nml_with $g/vocab.nml "s/vocab_size = 500/vocab_size = 2147483521/"
check_case vocab_past_int32 "&model vocab_size: must be in [1, 2147483520], got 2147483521 (the padded vocabulary" $g/vocab.nml
# 3. a shard shorter than one window among good ones (today: silently skipped)
nml_with $g/short.nml "s|data/tiny/train_\*.bin|$g/good_*.bin|"
check_case short_shard_among_good "good_2.bin holds 20 tokens, fewer than one window of seq_len + 1 = 33 tokens" $g/short.nml
# 4. validation asked for without validation data
nml_with $g/noval.nml "s|val_files = 'data/tiny/val_\*.bin'|val_files = ''|"
check_case val_every_without_val_files "&data val_files: val_every = 25 (line 19) asks for validation, but val_files is not set" $g/noval.nml
nml_with $g/valnone.nml "s|data/tiny/val_\*.bin|data/none_val_*.bin|"
check_case val_files_match_nothing "val_files: no file matches 'data/none_val_*.bin'" $g/valnone.nml
# 5. sizes beyond 32 bits and float keys that become integers
nml_with $g/mb.nml "s/micro_batch = 4, global_batch = 8/micro_batch = 100000000, global_batch = 0/"
check_case huge_micro_batch "&train micro_batch: micro_batch * seq_len = 100000000 * 32 = 3200000000 tokens per micro-batch exceed 2147483647" $g/mb.nml
{ sed "s/name = 'tiny'/name = 'timeout'/" $g/good.nml; echo "&checkpoint timeout_s = 1e-12 /"; } >$g/timeout.nml
check_case timeout_rounds_to_zero "&checkpoint timeout_s: must be in [0.001, 1e+09], got 1e-12 (the watchdog counts nanoseconds" $g/timeout.nml
nml_with $g/bucket.nml "s/  dp = 2/  dp = 2, bucket_mb = 1e30/"
check_case bucket_mb_huge "&parallel bucket_mb: must be in (0, 1e+06], got 1e30" $g/bucket.nml
nml_with $g/ranks.nml "s/  dp = 2/  dp = 2000000000, tp = 4/" "s/micro_batch = 4, global_batch = 8/micro_batch = 1, global_batch = 2000000000/"
check_case ranks_overflow "&parallel dp: dp * tp * pp = 2000000000 * 4 * 1 = 8000000000 ranks exceed 2147483647" $g/ranks.nml
# 6. nanoGPT's train.bin: refused with a hint without the key, trained on with it
nml_with $g/nano.nml "s|data/tiny/train_\*.bin|$g/train.bin|"
check_case nanogpt_without_format "train.bin: bad magic" $g/nano.nml
grep -qF "set &data format = 'nanogpt'" $g/nanogpt_without_format.err 2>/dev/null ||
    { [[ " ${failed[*]} " == *" nanogpt_without_format "* ]] || bad nanogpt_without_format_hint "no format = 'nanogpt' hint"; }
nml_with $g/nano_ok.nml "s|data/tiny/train_\*.bin|$g/train.bin|" "s|data/tiny/val_\*.bin|$g/val.bin|" \
    "s|val_batches = 4|val_batches = 4, format = 'nanogpt'|"
timeout 120 $MPIRUN -np 2 "$LLMTRAIN" $g/nano_ok.nml >$g/nano_ok.out 2>$g/nano_ok.err
rc=$?
if [ $rc -eq 0 ] && grep -q '"step":3,' $g/nano_ok/metrics.jsonl 2>/dev/null; then
    echo "ok  nanogpt_with_format: trained 3 steps on $g/train.bin with format = 'nanogpt'"
else
    tail -3 $g/nano_ok.err; bad nanogpt_with_format "exit code $rc or no step 3 in metrics.jsonl"
fi

if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "all bad-data cases refused"
