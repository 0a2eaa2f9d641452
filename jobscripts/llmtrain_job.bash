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
#   llmt_srun NML [k=v ...]     srun llmtrain on the grid (returns llmtrain's exit code); with
#                               LLMT_NODELIST set, on those nodes only; LLMT_OVERLAP=1: beside
#                               a failed step that still holds the CPUs
#   llmt_elastic NML [k=v ...]  llmt_srun through node failures, as &run elastic says (after
#                               llmt_check_allocation): a lost node is named with its ranks;
#                               'shrink' continues in the same allocation on the nodes that still
#                               answer, dp shrunk (llmt_shrink_grid), from the newest checkpoint;
#                               'wait' requeues the job, which waits for a whole set of nodes;
#                               'off' ends the job (elastic.sbatch; an exit 75 requeues, as
#                               requeue.sbatch does)
#   llmt_live_nodes NODE...     the given nodes that still answer (a job step on each within
#                               LLMT_PROBE_S seconds, default 15; Slurm's DOWN/NOT_RESPONDING
#                               nodes without asking)
#   llmt_guard                  run by llmtrain's watchdog on each rank (LLMT_HANG_HOOK, set by
#                               llmt_elastic: bash llmtrain_job.bash --guard): when the batch host
#                               is the node that died, requeues the job ('shrink', 'wait') or
#                               cancels it ('off'), since its batch script died with it
#   llmt_shrink_grid N NML [k=v ...]  the largest node count n <= N, n >= &run min_nodes, on which
#                               LLMT_PER_NODE ranks per node hold whole tp groups and a grid with
#                               dp shrunk (tp, pp and the global batch kept) is one llmtrain
#                               accepts: sets LLMT_NODES, LLMT_DP, LLMT_RANKS; none: exit 2
#                               naming min_nodes and the node count
#
# Binding, one rule: Slurm allocates, llmtrain binds. srun starts the ranks unbound
# (--cpu-bind=none) with LLMT_CPUS_PER_TASK CPUs each; llmtrain splits each node's cores evenly
# among the ranks on it (hwloc) and runs one OpenMP thread per core of its share.
# srun --mpi=pmix is the default launch; a site with another PMI sets LLMT_SRUN_MPI (e.g. pmi2).

# this file's absolute path: llmt_srun runs it on the nodes as the ranks' guard (llmt_guard)
LLMT_JOB_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

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
    local where=()
    [ -z "${LLMT_NODELIST:-}" ] || where=(--nodes="$LLMT_NODES" --nodelist="$LLMT_NODELIST")
    # after a lost node the failed step holds its CPUs until Slurm declares the node down
    [ -z "${LLMT_OVERLAP:-}" ] || where+=(--overlap)
    srun --mpi="${LLMT_SRUN_MPI:-pmix}" --ntasks="$LLMT_RANKS" --ntasks-per-node="$LLMT_PER_NODE" \
        --cpus-per-task="$LLMT_CPUS_PER_TASK" --cpu-bind=none --distribution=block \
        --kill-on-bad-exit=1 "${where[@]}" "$LLMT_BIN" "$@" &
    local pid=$!
    # wait returns early when a signal reaches this shell: wait again for the real exit code
    wait "$pid"
    local rc=$?
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
    return $rc
}

llmt_live_nodes() {
    local n state pids=() names=() i
    for n in "$@"; do
        state=$(scontrol -o show node "$n" 2>/dev/null | sed -n 's/.* State=\([^ ]*\).*/\1/p')
        case "$state" in *DOWN* | *NOT_RESPONDING* | *FAIL* | "") continue ;; esac
        # a job step on the node: --overlap, since the failed step may still hold its CPUs
        timeout -k 2 "${LLMT_PROBE_S:-15}" srun --overlap --nodes=1 --ntasks=1 --nodelist="$n" \
            --kill-on-bad-exit=1 true >/dev/null 2>&1 &
        pids+=($!) names+=("$n")
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" && echo "${names[$i]}"; done
    return 0
}

llmt_shrink_grid() {
    local avail=$1 n dp tpp=$((LLMT_TP * LLMT_PP)) why=""
    shift
    for ((n = avail; n >= LLMT_MIN_NODES && n >= 1; n--)); do
        [ $((n * LLMT_PER_NODE % tpp)) -eq 0 ] || { why="$why; $n nodes x $LLMT_PER_NODE ranks do not hold whole tp x pp = $tpp groups"; continue; }
        dp=$((n * LLMT_PER_NODE / tpp))
        [ "$dp" -le "$LLMT_DP_FULL" ] || continue
        if "$LLMT_BIN" --grid "$@" parallel.dp="$dp" >/dev/null 2>"$LLMT_TMP/grid.err"; then
            LLMT_NODES=$n LLMT_DP=$dp LLMT_RANKS=$((dp * tpp))
            return 0
        fi
        why="$why; $n nodes (dp $dp): $(sed -n 's/^llmtrain: error: //p' "$LLMT_TMP/grid.err" | head -1)"
    done
    llmt_die "&run min_nodes = $LLMT_MIN_NODES: $avail node(s) left of the job's ${#LLMT_POOL_ALL[@]}, and no grid of $LLMT_MIN_NODES..$avail nodes with $LLMT_PER_NODE ranks each fits${why}; the checkpoints in $LLMT_RUN_DIR are untouched: resubmit with more nodes"
}

# the ranks on node number i (0-based, in the step's node order) of a block distribution
llmt_node_ranks() { echo "$(($1 * LLMT_PER_NODE))-$((($1 + 1) * LLMT_PER_NODE - 1))"; }

llmt_elastic() {
    local rc used=() alive=() lost=() n i names
    LLMT_TMP=$(mktemp -d) LLMT_DP_FULL=$LLMT_DP
    # the ranks' guard (llmt_guard) watches this node, which runs the batch script
    LLMT_GUARD_HOST=${SLURMD_NODENAME:-$(hostname -s)}
    LLMT_JOB_OUT=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *StdOut=//p')
    LLMT_HANG_HOOK="bash $(printf %q "$LLMT_JOB_LIB") --guard" LLMT_HANG_HOOK_S=$((${LLMT_PROBE_S:-15} + 20))
    export LLMT_GUARD_HOST LLMT_JOB_OUT LLMT_ELASTIC LLMT_HANG_HOOK LLMT_HANG_HOOK_S
    mapfile -t LLMT_POOL_ALL < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    local pool=("${LLMT_POOL_ALL[@]}") extra=()
    case "$LLMT_ELASTIC" in off | shrink | wait) ;; *) llmt_die "&run elastic = '$LLMT_ELASTIC' is not off, shrink or wait" ;; esac
    echo "llmtrain job: &run elastic = '$LLMT_ELASTIC', min_nodes = $LLMT_MIN_NODES, nodes ${pool[*]}"
    while :; do
        used=("${pool[@]:0:$((LLMT_RANKS / LLMT_PER_NODE))}")
        LLMT_NODES=${#used[@]} LLMT_NODELIST=$(IFS=,; echo "${used[*]}")
        llmt_srun "$@" "${extra[@]}" parallel.dp="$LLMT_DP"
        rc=$?
        case $rc in 0 | 2 | 75) rm -rf "$LLMT_TMP"; return $rc ;; esac
        mapfile -t alive < <(llmt_live_nodes "${pool[@]}")
        lost=()
        for i in "${!used[@]}"; do
            [[ " ${alive[*]} " == *" ${used[$i]} "* ]] ||
                lost+=("${used[$i]} (ranks $(llmt_node_ranks "$i") of dp $LLMT_DP x tp $LLMT_TP x pp $LLMT_PP)")
        done
        if [ ${#lost[@]} -eq 0 ]; then
            echo "llmtrain job: llmtrain exited with $rc and every node answers: not a lost node, the job ends"
            rm -rf "$LLMT_TMP"; return $rc
        fi
        names=$(printf '%s, ' "${lost[@]}")
        echo "llmtrain job: lost node(s) ${names%, }: llmtrain exited with $rc; ${#alive[@]} of the job's ${#LLMT_POOL_ALL[@]} nodes answer (${alive[*]})"
        case "$LLMT_ELASTIC" in
            off) echo "llmtrain job: &run elastic = 'off': the job ends (shrink or wait to go on)"; rm -rf "$LLMT_TMP"; return $rc ;;
            wait)
                echo "llmtrain job: &run elastic = 'wait': requeueing job $SLURM_JOB_ID; it starts again when $SLURM_JOB_NUM_NODES nodes are free, from the newest checkpoint"
                rm -rf "$LLMT_TMP"
                scontrol requeue "$SLURM_JOB_ID" || llmt_die "scontrol requeue $SLURM_JOB_ID failed"
                exit $rc ;;
        esac
        pool=("${alive[@]}")
        llmt_shrink_grid "${#pool[@]}" "$@"
        echo "llmtrain job: &run elastic = 'shrink': continuing on $LLMT_NODES node(s) ${pool[*]:0:$LLMT_NODES} from the newest checkpoint: dp $LLMT_DP_FULL -> $LLMT_DP (tp $LLMT_TP, pp $LLMT_PP, the global batch kept by more accumulation)"
        extra=(checkpoint.resume="'auto'") LLMT_OVERLAP=1
    done
}

# llmt_guard: run by each rank's watchdog (LLMT_HANG_HOOK, set by llmt_elastic) when a wait of
# llmtrain's outlasts &checkpoint timeout_s, before the rank ends: a peer is gone. The batch
# script on LLMT_GUARD_HOST relaunches or ends the job after the step (llmt_elastic), unless
# that node is the one that died: then nobody would (--no-kill keeps the job RUNNING until its
# time limit). So one rank, the first of the step's first node other than the batch host, asks
# whether the batch host and its own node answer (llmt_live_nodes, at most LLMT_PROBE_S); when
# its own node does and the batch host does not (not when this node is the one cut off), it
# requeues the job (&run elastic 'shrink' or 'wait': it starts again on its full node count from
# the newest checkpoint) or cancels it ('off'), and says so in the job's output file
# (LLMT_JOB_OUT; the ranks' own output went to the srun that died). The step ends as soon as
# any rank ends (Slurm's PMIx plugin kills it), so the other ranks off the batch host wait for
# the guard's answer (LLMT_PROBE_S + 10 s at most; killed with the step as soon as it ends).
llmt_guard() {
    local host=${SLURMD_NODENAME:-$(hostname -s)} guard alive out=${LLMT_JOB_OUT:-/dev/stderr}
    [ -n "${LLMT_GUARD_HOST:-}" ] && [ "$host" != "$LLMT_GUARD_HOST" ] || return 0
    guard=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | grep -vx "$LLMT_GUARD_HOST" | head -1)
    if [ "$host" != "$guard" ] || [ "${SLURM_LOCALID:-0}" -ne 0 ]; then
        sleep $((${LLMT_PROBE_S:-15} + 10))
        return 0
    fi
    # the batch host lost, not this node cut off: this node answers (through slurmctld) and it not
    alive=" $(llmt_live_nodes "$LLMT_GUARD_HOST" "$host" | tr '\n' ' ')"
    [[ "$alive" == *" $host "* && "$alive" != *" $LLMT_GUARD_HOST "* ]] || return 0
    local what="requeueing job $SLURM_JOB_ID: it starts again when $SLURM_JOB_NUM_NODES nodes are free, from the newest checkpoint"
    [ "$LLMT_ELASTIC" != off ] || what="&run elastic = 'off': cancelling job $SLURM_JOB_ID"
    echo "llmtrain job: $(date '+%F %T') rank $LLMT_HANG_RANK on $host: llmtrain's watchdog found a peer gone and the batch host $LLMT_GUARD_HOST does not answer within ${LLMT_PROBE_S:-15} s (the batch script died with it): $what" >>"$out"
    if [ "$LLMT_ELASTIC" = off ]; then
        scancel "$SLURM_JOB_ID" >>"$out" 2>&1 || echo "llmtrain job: error: scancel $SLURM_JOB_ID failed on $host" >>"$out"
    else
        scontrol requeue "$SLURM_JOB_ID" >>"$out" 2>&1 || echo "llmtrain job: error: scontrol requeue $SLURM_JOB_ID failed on $host" >>"$out"
    fi
}

# run as a program by llmtrain's watchdog: bash llmtrain_job.bash --guard
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = --guard ]; then
    llmt_guard
    exit 0
fi
