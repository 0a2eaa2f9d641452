#!/usr/bin/env bash
# kill-node.sh K — node K of the emulated cluster dies as a crashed node does: every process in
# its network namespace (slurmd, slurmstepd, the ranks) is SIGKILLed at once, with no warning and
# no cleanup; its link stays, but nothing answers. slurmctld marks it DOWN after SlurmdTimeout
# (30 s). revive-node.sh K brings it back; down.sh removes what is left.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"
K=${1:-}
ns=$(cl_node_ns "$K" kill-node.sh)
# kill until the namespace is empty: a slurmd killed mid-fork could leave a child behind
for _ in 1 2 3 4 5; do
    mapfile -t pids < <(ip netns pids "$ns")
    [ ${#pids[@]} -gt 0 ] || break
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.2
done
cl_say "node n$K killed (SIGKILL to every process in namespace $ns)"
