# lib.bash — helpers shared by the scenario tests (sourced, not run).
# Each scenario runs from the repository root, writes under build/test-runs/<scenario>, exits 0 on
# success and prints the numbers that differ on failure.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${PYTHON:=/usr/bin/python3}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

TEST_DIR=build/test-runs/$(basename "$0" .sh)
rm -rf "$TEST_DIR" && mkdir -p "$TEST_DIR"
[ -f data/tiny/train_000.bin ] || $PYTHON validation/make_synthetic_shards.py data/tiny >/dev/null

fail() { echo "FAIL: $*"; exit 1; }

# write_tiny_nml PATH [key=value ...]: the tiny model of inputs/tiny.nml with overrides.
# Known keys: name max_steps dp mb gb lr schedule warmup anomaly inject mode init_from
#             val_every train_files val_files extra_run extra_train
write_tiny_nml() {
    local path=$1; shift
    local name=tiny max_steps=50 dp=1 mb=4 gb=8 lr=3e-3 schedule=cosine warmup=5 anomaly=skip
    local inject=-1 mode=train init_from="" val_every=25 extra_run="" extra_train=""
    local train_files='data/tiny/train_*.bin' val_files='data/tiny/val_*.bin'
    local kv
    for kv in "$@"; do local "${kv%%=*}=${kv#*=}"; done
    cat >"$path" <<NML
&run
  name = '$name', out_dir = '$TEST_DIR', mode = '$mode', seed = 1337
  init_from = '$init_from'
  $extra_run
/
&model
  n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32
/
&parallel
  dp = $dp
/
&train
  max_steps = $max_steps, micro_batch = $mb, global_batch = $gb
  lr = $lr, min_lr = 3e-4, warmup_steps = $warmup, lr_schedule = '$schedule'
  weight_decay = 0.1, grad_clip = 1.0, on_anomaly = '$anomaly', inject_nan_step = $inject
  $extra_train
/
&data
  train_files = '$train_files', val_files = '$val_files', val_every = $val_every, val_batches = 4
/
&log
  every = 1
/
NML
}

# losses FILE: the training losses of a metrics.jsonl, one per line
losses() { grep '"loss"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
# norms FILE: the gradient norms of a metrics.jsonl (before clipping), one per line. A wrong
# gradient scale hides behind AdamW and clipping in the losses; the norm shows it.
norms() { grep '"grad_norm"' "$1" | sed 's/.*"grad_norm":\([^,]*\),.*/\1/'; }
# train_records FILE: each step's loss, lr and gradient norm and each validation loss of a
# metrics.jsonl as written (9 significant digits: the same text is the same float)
train_records() { grep -o '"step":[0-9]*,"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*\|"val_loss":[^,}]*' "$1"; }
# same_weights A.h5 B.h5: every tensor of weights file A is in B with the same bits (the
# attributes, which name the run, may differ); says which differ
same_weights() {
    $PYTHON - "$1" "$2" <<'PY'
import h5py, sys, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if n not in b or not np.array_equal(a[n][()], b[n][()])]
sys.exit(f"{len(bad)} of {len(names)} tensors differ: {bad[:3]}" if bad or not names else 0)
PY
}
# same_series NAME TOL FILE_A FILE_B: two columns of numbers agree to relative TOL, line by line,
# and have the same (non-zero) length; prints the worst relative error
same_series() {
    paste "$3" "$4" | awk -v n="$1" -v tol="$2" '
        NF != 2 {bad = 1} {e = ($1 - $2) / ($1 == 0 ? 1 : $1); if (e < 0) e = -e; if (e > w) w = e; c++}
        END {printf "%s: %d values, worst rel.err %.1e (tol %g)\n", n, c, w, tol; exit !(c > 0 && !bad && w <= tol)}'
}

# check_case NAME WANT NML [NP]: bad input. llmtrain NML on NP ranks (2) exits with code 2 within
# 60 s, prints exactly one "llmtrain: error" line and it contains WANT, with no crash or MPI abort
# banner (output in $TEST_DIR/NAME.out, .err). Scripts that use it set `ulimit -c 0`.
check_case() {
    local name=$1 want=$2 nml=$3 np=${4:-2} rc
    timeout 60 $MPIRUN -np "$np" ./llmtrain "$nml" >"$TEST_DIR/$name.out" 2>"$TEST_DIR/$name.err"
    rc=$?
    [ $rc -eq 2 ] || { cat "$TEST_DIR/$name.err"; fail "$name: exit code $rc, expected 2"; }
    grep -qF -- "$want" "$TEST_DIR/$name.err" || { cat "$TEST_DIR/$name.err"; fail "$name: message lacks '$want'"; }
    local n; n=$(grep -c "llmtrain: error" "$TEST_DIR/$name.err")
    [ "$n" -eq 1 ] || { cat "$TEST_DIR/$name.err"; fail "$name: $n error lines, expected exactly 1"; }
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked" "$TEST_DIR/$name.err"; then fail "$name: crash/abort banner"; fi
    echo "ok  $name: $(grep 'llmtrain: error' "$TEST_DIR/$name.err")"
}

# step0_dump RUN DUMP: run directory RUN's step-0 weights, gradients (&train dump_grads_step = 0)
# and first loss in gpt_dump's layout (DUMP/weights.h5, grads.h5, loss.txt), which the PyTorch
# references (validation/reference/*_reference.py --dump) read.
step0_dump() {
    mkdir -p "$2"
    cp "$1/weights_step000000.h5" "$2/weights.h5"
    cp "$1/grads_step000000.h5" "$2/grads.h5"
    losses "$1/metrics.jsonl" | head -1 >"$2/loss.txt"
}

# launch_until_step NP NML NAME STEP: start llmtrain on NP ranks in the background (pid in
# LAUNCH_PID, output in $TEST_DIR/NAME.log) and wait until metrics.jsonl shows STEP.
launch_until_step() {
    $MPIRUN -np "$1" ./llmtrain "$2" >"$TEST_DIR/$3.log" 2>&1 &
    LAUNCH_PID=$!
    local i
    for i in $(seq 1200); do
        grep -q "\"step\":$4," "$TEST_DIR/$3/metrics.jsonl" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "$3 never reached step $4"
}
# wait_gone PID SECONDS: wait until PID has exited; non-zero if it still runs after SECONDS.
wait_gone() {
    local i
    for i in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -0 "$1" 2>/dev/null && return 1 || return 0
}

# run_ranks NAME NP: llmtrain on NP ranks with $TEST_DIR/NAME.nml (output $TEST_DIR/NAME.log);
# a non-zero exit fails the test with the log's tail
run_ranks() {
    timeout 120 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" </dev/null >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$1.log"; fail "$1 exited non-zero"; }
}
# same_run REF NAME [STEP]: run NAME has REF's losses (rel. 1e-6), gradient norms (rel. 1e-5) and
# final weights weights_stepSTEP.h5 (abs. 1e-5; STEP default 000004), on one line
same_run() {
    local a="$TEST_DIR/$1/metrics.jsonl" b="$TEST_DIR/$2/metrics.jsonl" w="weights_step${3:-000004}.h5"
    printf '%-24s ' "$2"
    same_series "losses vs $1" 1e-6 <(losses "$a") <(losses "$b") | tr '\n' ' ' ||
        fail "$2: losses differ from $1 by more than 1e-6 relative"
    same_series "norms" 1e-5 <(norms "$a") <(norms "$b") | tr '\n' ' ' ||
        fail "$2: gradient norms differ from $1 by more than 1e-5 relative"
    $PYTHON validation/compare_weights.py --atol 1e-5 "$TEST_DIR/$1/$w" "$TEST_DIR/$2/$w" >"$TEST_DIR/$2.weights" ||
        { cat "$TEST_DIR/$2.weights"; fail "$2: final weights differ from $1 by more than 1e-5"; }
    echo "| weights ok"
}

# storage_pair KEY LABEL NAME NP [overrides...]: $TEST_DIR/t.nml (run name r, 4 steps, weights
# written at step 4) on NP ranks with &train KEY = '16bit' and 'fp32' (run directories
# $TEST_DIR/NAME-16bit and NAME-fp32); the startup line "LABEL: ..." must say which storage each
# used, and the step records and final weights must be bit-identical (weights_storage.sh,
# activations_storage.sh)
storage_pair() {
    local key=$1 label=$2 name=$3 np=$4 v
    shift 4
    for v in 16bit fp32; do
        timeout 300 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/t.nml" run.out_dir="'$TEST_DIR/$name-$v'" \
            train.$key="'$v'" "$@" >"$TEST_DIR/$name-$v.log" 2>&1 ||
            { tail -20 "$TEST_DIR/$name-$v.log"; fail "$name ($v) exited non-zero"; }
    done
    grep -q "^$label: .* storage, 2 bytes per element" "$TEST_DIR/$name-16bit.log" ||
        fail "$name: the 16-bit storage was not used"
    grep -q "^$label: .* values in fp32 arrays" "$TEST_DIR/$name-fp32.log" ||
        fail "$name: the fp32 arrays were not used"
    local a b
    a=$(train_records "$TEST_DIR/$name-16bit/r/metrics.jsonl") b=$(train_records "$TEST_DIR/$name-fp32/r/metrics.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "$name: step records differ"; }
    same_weights "$TEST_DIR/$name-16bit/r/weights_step000004.h5" "$TEST_DIR/$name-fp32/r/weights_step000004.h5" ||
        fail "$name: final weights differ"
    printf '%-14s %d rank(s): %2d records bit-identical, final weights identical\n' "$name" "$np" "$(echo "$a" | wc -l)"
}

# storage_generate KEY WEIGHTS [overrides...]: greedy generation (8 tokens after ids 1 2 3 4) from
# weights file WEIGHTS with $TEST_DIR/t.nml and &train KEY = '16bit' and 'fp32': the same tokens
storage_generate() {
    local key=$1 weights=$2 v
    shift 2
    for v in 16bit fp32; do
        timeout 120 $MPIRUN -np 1 ./llmtrain "$TEST_DIR/t.nml" run.mode="'generate'" "$@" \
            train.$key="'$v'" run.init_from="'$weights'" run.prompt_ids=1,2,3,4 run.max_new_tokens=8 \
            run.temperature=0 run.out_dir="'$TEST_DIR/gen-$v'" >"$TEST_DIR/gen-$v.log" 2>&1 ||
            { tail -20 "$TEST_DIR/gen-$v.log"; fail "generate ($v)"; }
    done
    local g16 g32
    g16=$(grep "^generate: continuation" "$TEST_DIR/gen-16bit.log") g32=$(grep "^generate: continuation" "$TEST_DIR/gen-fp32.log")
    [ -n "$g16" ] && [ "$g16" = "$g32" ] || { echo "$g16"; echo "$g32"; fail "generation differs"; }
    echo "generate       1 rank:  the same tokens"
}
