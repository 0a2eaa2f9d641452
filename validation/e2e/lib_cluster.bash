# lib_cluster.bash — the emulated cluster for the scenario tests (sourced after lib.bash, not run).
#   cluster_start NAME N       validation/cluster/up.sh N as cluster NAME (LLMT_CLUSTER; not the
#                              default name, so a cluster started by hand stays untouched), its
#                              assignments in this shell, down.sh on exit whatever happens; exit
#                              77 with up.sh's reason where namespaces cannot be made
#   slurm_wait_gone JOB S      the job's final state once it has left the queue (else cancelled
#                              after S seconds: STILL_<state>_AFTER_Ss)
#   wait_steps FILE N          up to 60 s for N step records in metrics.jsonl FILE
CL=validation/cluster

cluster_start() {
    export LLMT_CLUSTER=$1
    trap '$CL/down.sh >>"$TEST_DIR/down.log" 2>&1 || echo "down.sh failed: $(tail -3 "$TEST_DIR/down.log")"' EXIT
    local env_lines rc
    env_lines=$($CL/up.sh "$2" 2>"$TEST_DIR/up.log")
    rc=$?
    if [ $rc -eq 77 ]; then echo "SKIP: $(grep -o 'cannot start here: .*' "$TEST_DIR/up.log")"; exit 77; fi
    [ $rc -eq 0 ] || { cat "$TEST_DIR/up.log"; fail "up.sh $2 failed (exit $rc)"; }
    eval "$env_lines"
    cat "$TEST_DIR/up.log"
    export PATH=$PWD:$PATH
    unset LLMTRAIN_HOME LLMT_BIN
}

slurm_wait_gone() {
    local i s=""
    for i in $(seq $(($2 * 2))); do
        s=$(scontrol -o show job "$1" 2>/dev/null | sed -n 's/.* JobState=\([^ ]*\).*/\1/p')
        case "$s" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) echo "$s"; return 0 ;; esac
        sleep 0.5
    done
    scancel "$1" 2>/dev/null
    echo "STILL_${s:-UNKNOWN}_AFTER_$2s"
}

wait_steps() {
    local n
    for _ in $(seq 240); do
        n=$(grep -c '"step"' "$1" 2>/dev/null)
        [ "${n:-0}" -ge "$2" ] && return 0
        sleep 0.25
    done
    return 1
}

# watch_job JOB OUT: waits (at most 240 s) until Slurm's job JOB has ended; sets state (its last
# JobState), t_end, and t_named (when OUT first said "lost node"; t_end if it never did)
watch_job() {
    state="" t_named=""
    for _ in $(seq 480); do
        state=$(scontrol -o show job "$1" 2>/dev/null | sed -n 's/.* JobState=\([^ ]*\).*/\1/p')
        case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
        grep -q "lost node" "$2" 2>/dev/null && [ -z "$t_named" ] && t_named=$(date +%s)
        sleep 0.5
    done
    t_end=$(date +%s)
    t_named=${t_named:-$t_end}
}

# pending_on_down JOB: waits (at most 120 s) until requeued job JOB is pending on a down node
# (Slurm marks one after SlurmdTimeout); prints "JobState=PENDING Reason=...", "" if it never was
pending_on_down() {
    local why=""
    for _ in $(seq 240); do
        why=$(scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=PENDING Reason=[^ ]*DOWN[^ ]*')
        [ -n "$why" ] && break
        sleep 0.5
    done
    echo "$why"
}

# elastic_dp4_args NAME [STEPS]: the elastic dp 4 job of the node-loss tests (cluster_elastic,
# cluster_batchhost, cluster_linkcut): sets STEPS (default 60) and ARGS, llmtrain's arguments for
# run NAME under $RUNS, with 'shrink' down to 2 nodes, a checkpoint every 10 steps (all kept) and
# a 10 s watchdog
elastic_dp4_args() {
    STEPS=${2:-60}
    ARGS=(inputs/tiny.nml parallel.dp=4 train.global_batch=16 train.max_steps=$STEPS data.val_every=0
          log.every=1 checkpoint.every=10 checkpoint.keep=100 checkpoint.timeout_s=10 checkpoint.io_timeout_s=10
          run.out_dir="'$RUNS'" run.name="$1" run.elastic="'shrink'" run.min_nodes=2)
}

# same_last_steps REF RUN N WHY: the last N step records of run REF and run RUN under $RUNS (loss,
# lr, gradient norm as written) are the same text, N of them; else fail with WHY and the first
# differences
same_last_steps() {
    local want got
    want=$(train_records "$RUNS/$1/metrics.jsonl" | grep '"step"' | tail -"$3")
    got=$(train_records "$RUNS/$2/metrics.jsonl" | grep '"step"' | tail -"$3")
    [ "$(echo "$want" | wc -l)" -eq "$3" ] && [ "$got" = "$want" ] ||
        { diff <(echo "$want") <(echo "$got") | head; fail "$4"; }
}
