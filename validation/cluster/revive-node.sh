#!/usr/bin/env bash
# revive-node.sh K — node K of the emulated cluster comes back after kill-node.sh K, as a
# rebooted node does: its local state (slurmd spool, PMIx directories) empty, its slurmd starts again (same hostname, address and config) and registers
# with slurmctld; a node Slurm had marked DOWN returns to service (ReturnToService=2). Waits up
# to 60 s for the node to be idle or allocated again.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"
K=${1:-}
ns=$(cl_node_ns "$K" revive-node.sh)
[ -z "$(ip netns pids "$ns")" ] || cl_die "node n$K is running (processes in $ns): kill-node.sh $K first" 2
# a rebooted node starts with empty local state: the killed steps' sockets and PMIx directories
# (slurmd would refuse a later step with the same id: "Address already in use")
rm -rf "${CL_DIR:?}/spool/n$K"/* "${CL_DIR:?}/pmix/n$K"/*
cl_start_slurmd "$K"
export SLURM_CONF=$CL_DIR/slurm.conf
for _ in $(seq 300); do
    case "$(sinfo -h -n "n$K" -o %T 2>/dev/null)" in idle | mixed | allocated | completing) cl_say "node n$K is back"; exit 0 ;; esac
    sleep 0.2
done
cl_die "node n$K did not come back within 60 s (sinfo: $(sinfo -h -n "n$K" -o %T 2>/dev/null))"
