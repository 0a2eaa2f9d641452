#!/usr/bin/env bash
# revive-node.sh K — node K of the emulated cluster comes back after kill-node.sh K, as a
# rebooted node does: its local state (slurmd spool, PMIx directories) empty, its slurmd starts
# again (same hostname, address and config, its link up again) and registers with slurmctld;
# after kill-node.sh --link K its link is set up again and its slurmd, which ran on, answers
# again. A node Slurm had marked DOWN returns to service (ReturnToService=2). Waits up to 60 s
# for the node to be idle or allocated again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"
K=${1:-}
ns=$(cl_node_ns "$K" revive-node.sh)
cut=$CL_DIR/run/link-cut-n$K
if [ -f "$cut" ] || ! ip link show "${LLMT_CLUSTER}-v$K" | grep -q ',UP'; then
    # after kill-node.sh --link K: the link comes back; its slurmd (still running) answers
    # slurmctld's next ping and the node returns to service
    ip link set "${LLMT_CLUSTER}-v$K" up || cl_die "cannot set ${LLMT_CLUSTER}-v$K up"
    rm -f "$cut"
    cl_say "node n$K: link ${LLMT_CLUSTER}-v$K up again"
fi
slurmd_alive=""
for p in $(ip netns pids "$ns"); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmd ] && slurmd_alive=$p; done
if [ -n "$slurmd_alive" ]; then
    # its slurmd ran on (the link was cut, not the node killed): Slurm would return the node at
    # its next ping of a DOWN node (about 40 s here); resume it now, as an administrator does
    # once the cable is fixed (refused, harmlessly, while the node is not marked DOWN yet)
    SLURM_CONF=$CL_DIR/slurm.conf scontrol update NodeName="n$K" State=RESUME 2>/dev/null || true
else
    [ -z "$(ip netns pids "$ns")" ] || cl_die "node n$K is running (processes in $ns) without its slurmd: kill-node.sh $K first" 2
    # a rebooted node starts with empty local state: the killed steps' sockets and PMIx directories
    # (slurmd would refuse a later step with the same id: "Address already in use")
    rm -rf "${CL_DIR:?}/spool/n$K"/* "${CL_DIR:?}/pmix/n$K"/*
    cl_start_slurmd "$K"
fi
export SLURM_CONF=$CL_DIR/slurm.conf
for _ in $(seq 300); do
    case "$(sinfo -h -n "n$K" -o %T 2>/dev/null)" in idle | mixed | allocated | completing) cl_say "node n$K is back"; exit 0 ;; esac
    sleep 0.2
done
cl_die "node n$K did not come back within 60 s (sinfo: $(sinfo -h -n "n$K" -o %T 2>/dev/null))"
