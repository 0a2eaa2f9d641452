#!/usr/bin/env bash
# An error only one rank sees is agreed by all: rank 1 runs in its own mount namespace (unshare -m)
# where a directory is hidden or read-only, as on a node whose mount is missing or broken. Every
# case must end within 30 s with exit code 2 on every rank (no hang in the next collective, no
# MPI_Abort banner) and exactly one error line, printed once, naming rank 1, its host and the
# file or directory:
#  1. the training data is not there on rank 1;
#  2. the tokenizer file is not there on rank 1 (mode = 'generate' with a text prompt);
#  3. the checkpoint directory is read-only on rank 1.
# And a path variable set on one node only (mpirun's MPMD syntax sets it for one rank), which each
# rank once expanded from its own environment (a silent hang until the watchdog either way):
#  4. ${LLMT_TEST_DATA} set on rank 0 alone: every rank expands rank 0's value and the run trains
#     (exit 0), on rank 0's files;
#  5. set on rank 1 alone: rank 0's refusal (the variable is not set) is every rank's: exit 2 within
#     30 s, one error line naming the key and the variable.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
if ! unshare -m true 2>/dev/null; then
    echo "skipped: unshare -m (a private mount namespace) is not permitted here"
    exit 77
fi
# run_split NAME NML HIDE [ro]: rank 0 as usual, rank 1 with HIDE covered by an empty tmpfs
run_split() {
    local name=$1 nml=$2 hide=$3 opt=${4:-rw} rc t0
    t0=$(date +%s)
    timeout 60 $MPIRUN -np 1 ./llmtrain "$nml" : -np 1 \
        unshare -m sh -c "mount -t tmpfs -o $opt,size=1m tmpfs '$hide' && exec ./llmtrain '$nml'" \
        >"$TEST_DIR/$name.log" 2>&1
    rc=$?
    local dt=$(($(date +%s) - t0))
    [ $rc -eq 2 ] || { tail -20 "$TEST_DIR/$name.log"; fail "$name: exit code $rc, expected 2"; }
    [ $dt -le 30 ] || fail "$name: took $dt s"
    [ "$(grep -c 'llmtrain: error' "$TEST_DIR/$name.log")" -eq 1 ] ||
        { cat "$TEST_DIR/$name.log"; fail "$name: not exactly one error line"; }
    grep -qiE "MPI_ABORT was invoked|core dumped|segmentation" "$TEST_DIR/$name.log" && fail "$name: crash or abort banner"
    grep "llmtrain: error: rank 1 (host $(hostname)): " "$TEST_DIR/$name.log" ||
        { cat "$TEST_DIR/$name.log"; fail "$name: the message does not name rank 1 and its host"; }
    grep -q -- "$5" "$TEST_DIR/$name.log" || fail "$name: the message lacks '$5'"
}

echo "== 1. data missing on rank 1"
mkdir -p "$TEST_DIR/data"
cp data/tiny/train_000.bin data/tiny/val_000.bin "$TEST_DIR/data/"
write_tiny_nml "$TEST_DIR/data.nml" name=data dp=2 train_files="$TEST_DIR/data/train_*.bin" \
    val_files="$TEST_DIR/data/val_*.bin"
run_split data "$TEST_DIR/data.nml" "$TEST_DIR/data" rw "no file matches '$TEST_DIR/data/train_\*.bin'"

echo "== 2. tokenizer missing on rank 1"
mkdir -p "$TEST_DIR/tok"
./llmprep --train-vocab 300 --out "$TEST_DIR/tok" validation/tokenizer/corpus/english.txt >"$TEST_DIR/llmprep.log" 2>&1 ||
    { tail "$TEST_DIR/llmprep.log"; fail "llmprep --train-vocab failed"; }
write_tiny_nml "$TEST_DIR/gen.nml" name=gen dp=2 mode=generate \
    extra_run="prompt = 'Hello there', max_new_tokens = 3, temperature = 0" \
    train_files= val_files= val_every=0
sed -i "s|^&data|\&data tokenizer = '$TEST_DIR/tok/tokenizer.tiktoken',|" "$TEST_DIR/gen.nml"
run_split gen "$TEST_DIR/gen.nml" "$TEST_DIR/tok" rw "tokenizer.tiktoken"

echo "== 3. checkpoint directory read-only on rank 1"
mkdir -p "$TEST_DIR/ckdir"
write_tiny_nml "$TEST_DIR/ck.nml" name=ck dp=2
sed -i "s|^&log|\&checkpoint dir = '$TEST_DIR/ckdir', every = 5 /\n\&log|" "$TEST_DIR/ck.nml"
run_split ck "$TEST_DIR/ck.nml" "$TEST_DIR/ckdir" ro \
    "the checkpoint directory (&checkpoint dir) $TEST_DIR/ckdir is not writable from this rank: Read-only file system"
echo "== 4. a path variable set on rank 0 alone: rank 0's value everywhere"
write_tiny_nml "$TEST_DIR/env.nml" name=env dp=2 max_steps=2 val_every=0 \
    train_files='${LLMT_TEST_DATA}/tiny/train_*.bin' val_files=
sed -i "s|^&checkpoint.*||; s|^&log|\&checkpoint timeout_s = 60 /\n\&log|" "$TEST_DIR/env.nml"
t0=$(date +%s)
timeout 120 $MPIRUN -np 1 -x LLMT_TEST_DATA=data ./llmtrain "$TEST_DIR/env.nml" : -np 1 ./llmtrain \
    "$TEST_DIR/env.nml" >"$TEST_DIR/env0.log" 2>&1 || { tail -20 "$TEST_DIR/env0.log"; fail "env0: exit $?"; }
grep -q "^step 2/2" "$TEST_DIR/env0.log" || fail "env0: did not train 2 steps"
grep -q "train_files *= 'data/tiny/train_\*.bin'" "$TEST_DIR/env0.log" ||
    fail "env0: the effective configuration does not show rank 0's expansion"
echo "env0: trained in $(($(date +%s) - t0)) s on rank 0's expansion data/tiny/train_*.bin"
echo "== 5. a path variable set on rank 1 alone: rank 0's refusal ends every rank"
t0=$(date +%s)
timeout 120 $MPIRUN -np 1 ./llmtrain "$TEST_DIR/env.nml" : -np 1 -x LLMT_TEST_DATA=data ./llmtrain \
    "$TEST_DIR/env.nml" >"$TEST_DIR/env1.log" 2>&1
rc=$? dt=$(($(date +%s) - t0))
[ $rc -eq 2 ] || { tail -20 "$TEST_DIR/env1.log"; fail "env1: exit $rc, expected 2"; }
[ $dt -le 30 ] || fail "env1: took $dt s"
[ "$(grep -c 'llmtrain: error' "$TEST_DIR/env1.log")" -eq 1 ] || { cat "$TEST_DIR/env1.log"; fail "env1: not exactly one error line"; }
grep -q "&data train_files: the environment variable LLMT_TEST_DATA .* is not set" "$TEST_DIR/env1.log" ||
    { cat "$TEST_DIR/env1.log"; fail "env1: the message does not name the key and the variable"; }
echo "env1: exit 2 on every rank in $dt s: $(grep 'llmtrain: error' "$TEST_DIR/env1.log")"
echo "every error seen by rank 1 alone ended the job on both ranks with one message naming rank 1"
