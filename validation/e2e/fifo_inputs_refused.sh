#!/usr/bin/env bash
# An input that is not a regular file (a FIFO here: opening one for reading waits for a writer,
# forever, and no watchdog watches an open) is refused by name, never waited on: a token shard
# (&data train_files, 2 ranks), the namelist file itself, &data tokenizer (mode 'generate'),
# llmprep's input file and --tokenizer, llmmerge's models(2) and its namelist. Each case ends
# within 20 s with exit code 2, exactly one error line naming the file and the key / argument, and
# no crash or MPI abort banner. Before core/fileio's file_open_regular every case hung (exit 124).
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
failed=()
bad() { echo "FAIL: $*"; failed+=("$1"); }

check_case() { # name program expected-substring np args...
    local name=$1 prog=$2 want=$3 np=$4 rc n; shift 4
    timeout -k 5 20 $MPIRUN -np "$np" "$prog" "$@" >"$g/$name.out" 2>"$g/$name.err"
    rc=$?
    if [ $rc -ne 2 ]; then tail -3 "$g/$name.err"; bad "$name" "exit code $rc, expected 2 (124: it hung)"; return; fi
    if ! grep -qF -- "$want" "$g/$name.err"; then cat "$g/$name.err"; bad "$name" "message lacks '$want'"; return; fi
    n=$(grep -c "$(basename "$prog"): error" "$g/$name.err")
    if [ "$n" -ne 1 ]; then cat "$g/$name.err"; bad "$name" "$n error lines, expected exactly 1"; return; fi
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked|internal invariant" "$g/$name.err"; then
        bad "$name" "crash/abort banner"; return
    fi
    echo "ok  $name: $(grep 'error' "$g/$name.err")"
}

for f in shard.bin run.nml vocab.tiktoken text.txt model.h5 merge.nml ckpt.h5; do mkfifo "$g/$f"; done
NOTREG="not a regular file (a FIFO"

# llmtrain: a token shard, the namelist, the tokenizer
write_tiny_nml $g/shard.nml name=shard dp=2 max_steps=3 val_every=0 train_files="$g/shard.bin"
check_case train_files_fifo ./llmtrain "train_files: $g/shard.bin: $NOTREG" 2 $g/shard.nml
check_case namelist_fifo ./llmtrain "$g/run.nml: cannot read the namelist file: $NOTREG" 2 $g/run.nml
write_tiny_nml $g/w.nml name=w max_steps=0 val_every=0
$MPIRUN -np 1 ./llmtrain $g/w.nml >$g/w.log 2>&1 || { tail $g/w.log; fail "making weights failed"; }
write_tiny_nml $g/gen.nml name=gen dp=2 mode=generate init_from=$g/w/weights_step000000.h5 val_every=0 \
    extra_run="prompt = 'hello'"
sed -i "s|^  train_files = |  tokenizer = '$g/vocab.tiktoken', train_files = |" $g/gen.nml
check_case tokenizer_fifo ./llmtrain "&data tokenizer: $g/vocab.tiktoken: cannot read: $NOTREG" 2 $g/gen.nml

# llmtrain: a checkpoint to start from or resume (HDF5's own open of a FIFO blocks)
write_tiny_nml $g/init.nml name=init dp=2 max_steps=3 val_every=0 init_from=$g/ckpt.h5
check_case init_from_fifo ./llmtrain "&run init_from: checkpoint $g/ckpt.h5: cannot read: $NOTREG" 2 $g/init.nml
write_tiny_nml $g/res.nml name=res dp=2 max_steps=3 val_every=0
sed -i "s#^&log#\&checkpoint resume = '$g/ckpt.h5' /\n\&log#" $g/res.nml
check_case resume_fifo ./llmtrain "&checkpoint resume: checkpoint $g/ckpt.h5: cannot read: $NOTREG" 2 $g/res.nml
write_tiny_nml $g/auto.nml name=auto max_steps=2 val_every=0
sed -i "s#^&log#\&checkpoint resume = 'auto' /\n\&log#" $g/auto.nml
mkdir -p $g/auto && mkfifo $g/auto/ckpt_step00000004.h5
timeout -k 5 30 $MPIRUN -np 1 ./llmtrain $g/auto.nml >$g/auto.log 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qF "refused checkpoint $g/auto/ckpt_step00000004.h5: cannot read: $NOTREG" $g/auto.log; then
    echo "ok  resume_auto_fifo: $(grep 'refused checkpoint' $g/auto.log)"
else tail -3 $g/auto.log; bad resume_auto_fifo "exit code $rc (124: it hung) or no warning naming the FIFO"; fi

# llmprep: an input file, the tokenizer
echo "some text" >$g/real.txt
check_case llmprep_input_fifo ./llmprep "input file 2 '$g/text.txt': $NOTREG" 2 --out $g/prep $g/real.txt $g/text.txt
check_case llmprep_tokenizer_fifo ./llmprep "--tokenizer: $g/vocab.tiktoken: cannot read: $NOTREG" 2 \
    --tokenizer $g/vocab.tiktoken --out $g/prep $g/real.txt

# llmmerge: a model, the namelist
W=$g/w/weights_step000000.h5
printf "&merge\n  method = 'linear'\n  models = '%s', '%s'\n  out = '%s'\n/\n" "$W" "$g/model.h5" "$g/out.h5" >$g/m.nml
check_case llmmerge_model_fifo ./llmmerge "models(2) '$g/model.h5': cannot read: $NOTREG" 2 $g/m.nml
check_case llmmerge_namelist_fifo ./llmmerge "$g/merge.nml: cannot read the namelist: $NOTREG" 2 $g/merge.nml

[ ${#failed[@]} -eq 0 ] || fail "${#failed[@]} case(s): ${failed[*]}"
echo "PASS: every FIFO refused by name with exit code 2"
