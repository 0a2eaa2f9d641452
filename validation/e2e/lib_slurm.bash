# lib_slurm.bash — a private Slurm on localhost for the scenario tests (sourced after lib.bash).
# munged, slurmctld and slurmd run from a temporary directory (config, state, spool, logs, the
# munge key and socket), on ports of their own, so nothing of a site's Slurm is touched; the test
# starts them and stops them by PID. Clients find this Slurm through SLURM_CONF.
#   slurm_start      start it (or exit 77 with the reason when it cannot start here)
#   slurm_wait JOB SECONDS   wait until job JOB is no longer pending or running
#   slurm_stop       stop the daemons (also on exit: a trap)
# Jobs run as root with MpiDefault=pmix, proctrack/linuxproc, no cgroups and no accounting.

source "$(dirname "${BASH_SOURCE[0]}")/../slurm_conf.bash"
SLURM_DIR=${SLURM_DIR:-/tmp/llmt-slurm-$$}
SLURM_PIDS=()

slurm_skip() { echo "SKIP: $*"; exit 77; }

slurm_write_conf() {
    local host node mem port
    host=$(hostname -s)
    # 80% of the memory for jobs
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    # The node offers at least 8 CPUs (config_overrides: more than this machine has), so an
    # 8-rank 3D job fits; llmtrain then places 8 ranks on the real cores (oversubscribed).
    local c
    c=$(nproc)
    [ "$c" -ge 8 ] || c=8
    node="CPUs=$c Boards=1 SocketsPerBoard=1 CoresPerSocket=$c ThreadsPerCore=1"
    port=$((20000 + ($$ % 4000) * 2)) # two ports of our own: ctld, then slurmd
    mkdir -p "$SLURM_DIR"/{state,spool,log,run,munge}
    slurm_conf_write "$SLURM_DIR/slurm.conf" "$SLURM_DIR" llmtest "$host" "$port" $((port + 1)) 60 <<CONF
NodeName=$host $node RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

slurm_start_munge() {
    munge_key_make "$SLURM_DIR/munge"
    munged --force --foreground --key-file="$SLURM_DIR/munge/munge.key" \
        --socket="$SLURM_DIR/munge/munge.socket" --pid-file="$SLURM_DIR/munge/munged.pid" \
        --log-file="$SLURM_DIR/log/munged.log" --seed-file="$SLURM_DIR/munge/munged.seed" \
        >/dev/null 2>&1 &
    SLURM_PIDS+=($!)
    local i
    for i in $(seq 50); do [ -S "$SLURM_DIR/munge/munge.socket" ] && return 0; sleep 0.1; done
    slurm_skip "munged did not start ($(tail -1 "$SLURM_DIR/log/munged.log" 2>/dev/null))"
}

slurm_start() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
        slurm_skip "Slurm (slurmctld, slurmd) or munge is not installed: make deps installs them"
    [ "$(id -u)" -eq 0 ] || slurm_skip "a private Slurm needs root here (slurmd starts jobs as their user)"
    rm -rf "$SLURM_DIR"
    slurm_write_conf
    export SLURM_CONF=$SLURM_DIR/slurm.conf
    trap slurm_stop EXIT
    slurm_start_munge
    slurmctld -D -i -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmctld.out" 2>&1 &
    SLURM_PIDS+=($!)
    slurmd -D -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmd.out" 2>&1 &
    SLURM_PIDS+=($!)
    local i state
    for i in $(seq 150); do
        state=$(sinfo -h -o %T 2>/dev/null | head -1)
        case "$state" in idle*) return 0 ;; esac
        sleep 0.2
    done
    slurm_skip "the private Slurm did not come up (node state '$state'; $(tail -2 "$SLURM_DIR/log/slurmctld.log" 2>/dev/null | tr '\n' ' '))"
}

slurm_stop() {
    local p
    for p in "${SLURM_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SLURM_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    SLURM_PIDS=()
}

# slurm_field JOB KEY: the value of KEY=... in `scontrol -o show job JOB` (JobState, Reason,
# ExitCode, Restarts, ...)
slurm_field() { scontrol -o show job "$1" 2>/dev/null | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }

# slurm_wait JOB SECONDS [HOOK]: until the job has finished (completed, failed, cancelled, timed
# out); prints its final state. HOOK JOB STATE, if given, runs at every poll.
slurm_wait() {
    local i s
    for i in $(seq $(($2 * 2))); do
        s=$(slurm_field "$1" JobState)
        case "$s" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) echo "$s"; return 0 ;; esac
        [ -n "${3:-}" ] && "$3" "$1" "$s"
        sleep 0.5
    done
    echo "TIMEOUT_WAITING($s)"
    return 1
}

# slurm_exit_code JOB: the batch script's exit code as Slurm recorded it
slurm_exit_code() { slurm_field "$1" ExitCode | cut -d: -f1; }
# slurm_restarts JOB: how many times the job was requeued
slurm_restarts() { slurm_field "$1" Restarts; }
