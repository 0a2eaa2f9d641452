# llmtrain_job.bash — what every llmtrain jobscript does, in one place (sourced, not submitted):
# find the binary, check the allocation against the namelist's grid, launch with srun.
#
#   llmt_find                   set LLMT_BIN: $LLMT_BIN, else $LLMTRAIN_HOME/bin/llmtrain, else
#                               llmtrain on PATH, else `module load ${LLMTRAIN_MODULE:-llmtrain}`
#                               (its errors shown; 'none' skips it); none of these: exit 2
#   llmt_grid NML [k=v ...]     set LLMT_RANKS, LLMT_DP, LLMT_TP, LLMT_PP from the namelist (with
#                               command-line overrides), as llmtrain itself reads it
#   llmt_check_allocation       the job's tasks, nodes and CPUs against LLMT_RANKS: a mismatch is
#                               one message with the fix, exit 2, before anything starts; sets
#                               LLMT_PER_NODE and LLMT_CPUS_PER_TASK
#   llmt_srun NML [k=v ...]     srun llmtrain on the grid (returns llmtrain's exit code)
#
# Binding, one rule: Slurm allocates, llmtrain binds. srun starts the ranks unbound
# (--cpu-bind=none) with LLMT_CPUS_PER_TASK CPUs each; llmtrain splits each node's cores evenly
# among the ranks on it (hwloc) and runs one OpenMP thread per core of its share.
# srun --mpi=pmix is the default launch; a site with another PMI sets LLMT_SRUN_MPI (e.g. pmi2).

llmt_die() { echo "llmtrain job: error: $*" >&2; exit 2; }

llmt_find() {
    if [ -n "${LLMT_BIN:-}" ]; then
        [ -x "$LLMT_BIN" ] || llmt_die "LLMT_BIN=$LLMT_BIN is not an executable"
        return 0
    fi
    if [ -z "${LLMTRAIN_HOME:-}" ] && ! command -v llmtrain >/dev/null 2>&1 &&
        [ "${LLMTRAIN_MODULE:-llmtrain}" != none ]; then
        if ! type module >/dev/null 2>&1; then # batch shells are not login shells
            for init in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
                [ -f "$init" ] && { source "$init"; break; }
            done
        fi
        type module >/dev/null 2>&1 ||
            llmt_die "llmtrain is not on PATH, LLMTRAIN_HOME is not set, and there is no 'module' command to load ${LLMTRAIN_MODULE:-llmtrain}"
        echo "llmtrain job: module load ${LLMTRAIN_MODULE:-llmtrain}"
        module load "${LLMTRAIN_MODULE:-llmtrain}" ||
            llmt_die "module load ${LLMTRAIN_MODULE:-llmtrain} failed (its message is above): fix the module, set LLMTRAIN_HOME=<prefix>, or put llmtrain on PATH"
    fi
    if [ -n "${LLMTRAIN_HOME:-}" ]; then
        LLMT_BIN=$LLMTRAIN_HOME/bin/llmtrain
        [ -x "$LLMT_BIN" ] || llmt_die "LLMTRAIN_HOME=$LLMTRAIN_HOME has no bin/llmtrain (make install PREFIX=$LLMTRAIN_HOME)"
    else
        LLMT_BIN=$(command -v llmtrain) ||
            llmt_die "llmtrain not found: module load llmtrain, set LLMTRAIN_HOME=<prefix>, or put it on PATH (make install PREFIX=...)"
    fi
    echo "llmtrain job: $LLMT_BIN ($("$LLMT_BIN" --version 2>/dev/null | head -1))"
}

llmt_grid() {
    local line
    line=$("$LLMT_BIN" --grid "$@") || llmt_die "llmtrain --grid $* failed: ${line:-see above}"
    eval "$line" # LLMT_RANKS=.. LLMT_DP=.. LLMT_TP=.. LLMT_PP=..
    [ -n "${LLMT_RANKS:-}" ] || llmt_die "llmtrain --grid $* printed no grid"
}

llmt_check_allocation() {
    local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} cpus=${SLURM_CPUS_ON_NODE:-}
    local grid="&parallel dp*tp*pp = $LLMT_DP*$LLMT_TP*$LLMT_PP = $LLMT_RANKS ranks"
    [ -n "${SLURM_JOB_ID:-}" ] || llmt_die "not inside a Slurm job (submit with sbatch)"
    if [ -n "${SLURM_NTASKS:-}" ] && [ "$SLURM_NTASKS" -ne "$LLMT_RANKS" ]; then
        llmt_die "the job has $SLURM_NTASKS tasks but $grid: submit with --ntasks=$LLMT_RANKS (or without --ntasks), or change the grid to $SLURM_NTASKS ranks (e.g. parallel.dp=$((SLURM_NTASKS / (LLMT_TP * LLMT_PP))) on the command line)"
    fi
    [ $((LLMT_RANKS % nodes)) -eq 0 ] ||
        llmt_die "$grid do not divide evenly over the job's $nodes nodes: submit with --nodes=N where N divides $LLMT_RANKS"
    LLMT_PER_NODE=$((LLMT_RANKS / nodes))
    if [ "$LLMT_TP" -gt 1 ] && [ $((LLMT_PER_NODE % LLMT_TP)) -ne 0 ]; then
        llmt_die "$LLMT_PER_NODE ranks per node do not hold whole tensor-parallel groups of tp = $LLMT_TP (tp all-reduces every layer: keep them in a node): use fewer nodes"
    fi
    [ -n "$cpus" ] || cpus=$(nproc)
    [ "$LLMT_PER_NODE" -le "$cpus" ] ||
        llmt_die "$LLMT_PER_NODE ranks per node but the job has $cpus CPUs per node: submit with --nodes=$(((LLMT_RANKS + cpus - 1) / cpus)) or more, or use a smaller grid"
    LLMT_CPUS_PER_TASK=$((cpus / LLMT_PER_NODE))
    echo "llmtrain job: $grid on $nodes node(s): $LLMT_PER_NODE ranks per node, $LLMT_CPUS_PER_TASK CPUs each (job $SLURM_JOB_ID)"
}

llmt_srun() {
    srun --mpi="${LLMT_SRUN_MPI:-pmix}" --ntasks="$LLMT_RANKS" --ntasks-per-node="$LLMT_PER_NODE" \
        --cpus-per-task="$LLMT_CPUS_PER_TASK" --cpu-bind=none --distribution=block \
        --kill-on-bad-exit=1 "$LLMT_BIN" "$@" &
    local pid=$!
    # wait returns early when a signal reaches this shell: wait again for the real exit code
    wait "$pid"
    local rc=$?
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
    return $rc
}
