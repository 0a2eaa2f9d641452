#!/usr/bin/env bash
# kill-node.sh [--link] K — node K of the emulated cluster fails.
#   kill-node.sh K         it dies as a crashed node does: every process in its network namespace
#                          (slurmd, slurmstepd, the ranks) is SIGKILLed at once, with no warning
#                          and no cleanup. Its link goes down first and stays down: a crashed
#                          machine sends nothing, not even the FIN or RST a living kernel sends
#                          for its killed processes' connections (peers that saw those would
#                          learn of the death at once, which a real crash never tells them).
#   kill-node.sh --link K  its link is cut (the bridge side of its veth pair set down, as a pulled
#                          cable or a dead switch port): its processes live on but reach nobody
#                          and nobody reaches them; no packet is refused or reset, they are lost,
#                          so its peers see silence, not an error.
# Either way slurmctld marks it DOWN after SlurmdTimeout (30 s). revive-node.sh K brings it back
# (restarts slurmd, or sets the link up again); down.sh removes what is left.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"
mode=kill
[ "${1:-}" != --link ] || { mode=link; shift; }
K=${1:-}
ns=$(cl_node_ns "$K" "kill-node.sh [--link]")
if [ $mode = link ]; then
    ip link set "${LLMT_CLUSTER}-v$K" down || cl_die "cannot set ${LLMT_CLUSTER}-v$K down"
    touch "$CL_DIR/run/link-cut-n$K"
    cl_say "node n$K cut off (link ${LLMT_CLUSTER}-v$K down; its processes run on, unreachable)"
    exit 0
fi
ip link set "${LLMT_CLUSTER}-v$K" down || cl_die "cannot set ${LLMT_CLUSTER}-v$K down"
# kill until the namespace is empty: a slurmd killed mid-fork could leave a child behind
for _ in 1 2 3 4 5; do
    mapfile -t pids < <(ip netns pids "$ns")
    [ ${#pids[@]} -gt 0 ] || break
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.2
done
cl_say "node n$K killed (link ${LLMT_CLUSTER}-v$K down, then SIGKILL to every process in namespace $ns)"
