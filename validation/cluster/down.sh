#!/usr/bin/env bash
# down.sh — stop the emulated cluster of up.sh: every process in its nodes' namespaces (slurmd,
# job steps, ranks), slurmctld, munged; then the namespaces, veth pairs and bridge. Safe to run
# again, after a half-made up.sh, or after kill-node.sh. Logs stay in $CL_DIR/log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"

# cl_stop_pids PID...: SIGTERM, up to 5 s to go, then SIGKILL
cl_stop_pids() {
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    local i p alive
    for i in $(seq 50); do
        alive=()
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        [ ${#alive[@]} -eq 0 ] && return 0
        sleep 0.1
    done
    cl_say "still running after SIGTERM, killed: ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null || true
}

stopped=0
# the nodes first (their slurmd and whatever runs in them), so slurmctld sees no new work
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${LLMT_CLUSTER}-n[0-9]+$" || true); do
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    cl_stop_pids "${pids[@]}"
    # a process forked while the others stopped is not in that list: kill until none is left
    # (a namespace removed with a process still in it lives on, unreachable)
    for _ in $(seq 25); do
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
        [ ${#pids[@]} -gt 0 ] || break
        kill -KILL "${pids[@]}" 2>/dev/null || true
        sleep 0.2
    done
    [ ${#pids[@]} -eq 0 ] || cl_say "warning: processes ${pids[*]} in $ns did not die"
    ip netns del "$ns"
    stopped=$((stopped + 1))
done
for f in slurmctld.launch.pid munged.pid; do
    [ -f "$CL_DIR/run/$f" ] || continue
    p=$(cat "$CL_DIR/run/$f")
    # only a process that is still the daemon we started (pid reuse)
    if [ -n "$p" ] && grep -qE 'slurmctld|munged' "/proc/$p/comm" 2>/dev/null; then cl_stop_pids "$p"; fi
    rm -f "$CL_DIR/run/$f"
done
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${LLMT_CLUSTER}-(v[0-9]+|br)$" || true); do
    ip link del "$l" 2>/dev/null || true
done
rm -f "$CL_DIR/nodes"
rm -rf "$CL_DIR/pmix" "$CL_DIR/spool" "$CL_DIR/munge"
cl_say "down: cluster '$LLMT_CLUSTER' stopped ($stopped node namespaces removed); logs in $CL_DIR/log"
