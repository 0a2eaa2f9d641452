#!/usr/bin/env bash
# Asynchronous checkpoints (&checkpoint async = .true.; the default with device = 'cuda'), 2
# ranks, tp = 2, a save every 4 steps of 12. The reference is one uninterrupted run (A); its
# periodic saves are written in the background while steps 5-7 and 9-11 train.
#  1. A's periodic saves are asynchronous and their records carry async, stall_s, write_s and
#     mib_per_s (the final save is synchronous: async false); `latest` names the final file.
#  2. resume from A's asynchronous checkpoint of step 8 (a new run directory) trains steps 9-12
#     with bit-identical losses and gradient norms (the snapshot is step 8's state, not a later
#     one the writer caught while training went on).
#  3. LLMT_MPI_FUNNELED=1 (an MPI without MPI_THREAD_MULTIPLE): one note, every save synchronous.
#  4. a background write that fails (a file-size limit on rank 1, its MPI-IO writes fail with
#     EFBIG inside the writer thread): a warning naming the background write, a metrics record
#     (failed, async), no .tmp or half file, `latest` still names step 4, training goes on to
#     step 12 (the final, synchronous save fails too: exit 5); the next run resumes from step 4.
#  5. SIGTERM while a background write is in flight (raised on the writer thread, before its
#     data): the write is drained (committed, `latest` names it), the step the run stops at is
#     saved, exit 75; the next run resumes from that step bit-identically to A.
#  6. kill -9 of a rank during a background write: the job dies; the older checkpoint (step 4)
#     stays, `latest` names it, the next run resumes from it bit-identically to a run from the
#     same checkpoint that was never killed.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
nml() { # name [resume]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel tp = 2 /
&train max_steps = 12, micro_batch = 4, global_batch = 8, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 4, keep = 5, resume = '${2:-auto}', io_timeout_s = 20, async = .true. /
&log every = 1 /
NML
}
run() { # name [LLMT_FAULT] [log tag]: output in $TEST_DIR/name.tag.log (tag: run)
    LOG=$TEST_DIR/$1.${3:-run}.log
    LLMT_FAULT=${2:-} timeout 120 $MPIRUN -np 2 -x LLMT_FAULT -x LLMT_MPI_FUNNELED ./llmtrain \
        "$TEST_DIR/$1.nml" >"$LOG" 2>&1
}
export LLMT_MPI_FUNNELED=0
ckpt() { printf '%s/%s/ckpt_step%08d.h5' "$TEST_DIR" "$1" "$2"; }
# record NAME STEP: the checkpoint record of STEP in NAME's metrics.jsonl
record() { grep "^{\"step\":$2,\"checkpoint\":" "$TEST_DIR/$1/metrics.jsonl"; }
# steps_after NAME FROM: the step records (loss, lr, norm as written) after step FROM of NAME's
# last run (an interrupted run before it may have logged some of the same steps)
steps_after() { train_records "$TEST_DIR/$1/metrics.jsonl" | awk -F'[:,]' -v s="$2" '$2 > s' | tail -n $((12 - $2)); }
# same_as REF NAME FROM: NAME's steps after FROM are REF's, bit for bit
same_as() {
    steps_after "$1" "$3" >"$TEST_DIR/$1.after$3"
    steps_after "$2" "$3" >"$TEST_DIR/$2.after$3"
    [ "$(wc -l <"$TEST_DIR/$2.after$3")" -eq $((12 - $3)) ] || fail "$2: $(wc -l <"$TEST_DIR/$2.after$3") steps after $3, want $((12 - $3))"
    diff "$TEST_DIR/$1.after$3" "$TEST_DIR/$2.after$3" >"$TEST_DIR/$2.diff" ||
        { cat "$TEST_DIR/$2.diff"; fail "$2: steps $(($3 + 1))-12 differ from those of $1"; }
    echo "ok  $2: steps $(($3 + 1))-12 bit-identical to those of $1"
}
# base NAME: NAME's run directory with the synchronous final checkpoint of step 4 (of a run of 4
# steps: the learning rate schedule is not A's)
base() {
    nml "$1"
    sed -i 's/max_steps = 12/max_steps = 4/' "$TEST_DIR/$1.nml"
    run "$1" "" base || { tail "$LOG"; fail "$1: the run to step 4 failed"; }
    sed -i 's/max_steps = 4/max_steps = 12/' "$TEST_DIR/$1.nml"
}
t_start=$(date +%s)

echo "== 1. the uninterrupted run: background saves and their records"
nml A
run A || { tail -20 "$LOG"; fail "A: the run failed"; }
for s in 4 8; do
    r=$(record A $s) || fail "A: no checkpoint record of step $s"
    for k in '"async":true' '"stall_s":' '"write_s":' '"mib_per_s":'; do
        grep -qF "$k" <<<"$r" || fail "A: the record of step $s lacks $k: $r"
    done
    grep -q "^checkpoint: step $s (every) .*in the background" "$LOG" || fail "A: the save of step $s was not in the background"
done
record A 12 | grep -q '"checkpoint":"final".*"async":false' || fail "A: the final save is not synchronous: $(record A 12)"
grep -q "ckpt_step00000012.h5" "$TEST_DIR/A/latest" || fail "A: latest is $(cat "$TEST_DIR/A/latest")"
record A 8 | sed 's/.*\("stall_s":[^,]*,"write_s":[^,]*,"mib_per_s":[^,]*\).*/step 8: \1/'

echo "== 2. resume from the asynchronous checkpoint of step 8"
nml B "$(ckpt A 8)"
run B || { tail -20 "$LOG"; fail "B: the resumed run failed"; }
grep -q "^resume: .*ckpt_step00000008.h5: step 8," "$LOG" || fail "B: did not resume from A's step 8"
same_as A B 8

echo "== 3. an MPI without MPI_THREAD_MULTIPLE (LLMT_MPI_FUNNELED=1): synchronous saves"
nml F
LLMT_MPI_FUNNELED=1 run F || { tail -20 "$LOG"; fail "F: the run failed"; }
grep -q "needs MPI_THREAD_MULTIPLE.*every save is synchronous" "$LOG" || fail "F: no note about the synchronous saves"
record F 4 | grep -q '"async":false' || fail "F: the save of step 4 was not synchronous: $(record F 4)"
[ "$(grep -c 'in the background' "$LOG")" -eq 0 ] || fail "F: a save was in the background"

echo "== 4. a background write that fails (EFBIG on rank 1)"
base E
run E setup@1:fsize1048576
rc=$?
[ $rc -eq 5 ] || { tail -20 "$LOG"; fail "E: exit code $rc, expected 5 (the final save fails too)"; }
grep "checkpoint at step 8 (every) not written: .*rank 1 .*(a background write); earlier checkpoints are intact; training goes on" "$LOG" ||
    { tail -20 "$LOG"; fail "E: no warning about the failed background write"; }
record E 8 | grep -q '"failed":true,"async":true' || fail "E: no metrics record of the failed background write: $(record E 8)"
grep -q '"step":12,"loss"' "$TEST_DIR/E/metrics.jsonl" || fail "E: training did not go on to step 12"
ls "$TEST_DIR/E" | grep -q '\.tmp$' && fail "E: a .tmp file was left: $(ls "$TEST_DIR/E")"
[ -e "$(ckpt E 8)" ] && fail "E: a checkpoint of step 8 exists"
grep -q "ckpt_step00000004.h5" "$TEST_DIR/E/latest" || fail "E: latest is $(cat "$TEST_DIR/E/latest"), want step 4"
run E "" next || { tail "$LOG"; fail "E: the run after the failure failed"; }
grep -q "^resume: .*ckpt_step00000004.h5: step 4," "$LOG" || fail "E: the next run did not resume from step 4"

echo "== 5. SIGTERM while a background write is in flight"
nml T
run T save@0:term
rc=$?
[ $rc -eq 75 ] || { tail -20 "$LOG"; fail "T: exit code $rc, expected 75"; }
grep -q "^checkpoint: step 4 (every) .*in the background" "$LOG" || fail "T: the background write of step 4 was not drained"
stop=$(sed -n 's/^{"step":\([0-9]*\),"stopped_by":"SIGTERM","exit_code":75}$/\1/p' "$TEST_DIR/T/metrics.jsonl")
[ -n "$stop" ] && [ "$stop" -gt 4 ] || fail "T: no record of the SIGTERM after step 4: '$stop'"
record T 4 | grep -q '"async":true' || fail "T: no record of the drained write of step 4"
record T "$stop" | grep -q '"checkpoint":"signal"' || fail "T: the step it stopped at ($stop) was not saved"
grep -q "ckpt_step$(printf %08d "$stop").h5" "$TEST_DIR/T/latest" || fail "T: latest is $(cat "$TEST_DIR/T/latest")"
run T "" next || { tail "$LOG"; fail "T: the resumed run failed"; }
grep -q "^resume: .*step $stop," "$LOG" || fail "T: did not resume from step $stop"
same_as A T "$stop"

echo "== 6. kill -9 during a background write"
base Kref
run Kref "" next || { tail "$LOG"; fail "Kref: the reference run from step 4 failed"; }
base K
run K save@0:kill
rc=$?
[ $rc -ne 0 ] || fail "K: the killed job exited 0"
grep -q "LLMT_FAULT: kill at 'save'" "$LOG" || fail "K: the rank was not killed in the write"
[ -e "$(ckpt K 8)" ] && fail "K: a checkpoint of step 8 was published by a killed write"
grep -q "ckpt_step00000004.h5" "$TEST_DIR/K/latest" || fail "K: latest is $(cat "$TEST_DIR/K/latest"), want step 4"
run K "" next || { tail "$LOG"; fail "K: the run after the kill failed"; }
grep -q "^resume: .*ckpt_step00000004.h5: step 4," "$LOG" || fail "K: the next run did not resume from step 4"
same_as Kref K 4

echo "asynchronous checkpoints: records, bit-identical resume, failure, SIGTERM and kill -9 all as documented ($(( $(date +%s) - t_start )) s)"
