# common.bash — names and paths shared by up.sh, kill-node.sh and down.sh (sourced, not run).
# One emulated cluster per LLMT_CLUSTER name (default llmtc): its directory, namespaces, bridge,
# subnet and ports all derive from the name, so a second cluster or the localhost Slurm of
# validation/e2e/lib_slurm.bash (ports 20000-27999, /tmp/llmt-slurm-PID) never collides with it.
#   node K (1..N): network namespace ${LLMT_CLUSTER}-nK, hostname nK, address $CL_NET.K on the
#   bridge ${LLMT_CLUSTER}-br; the host side of the bridge is $CL_NET.254, where slurmctld
#   (hostname ${LLMT_CLUSTER}-ctl, own UTS namespace) and munged listen.

LLMT_CLUSTER=${LLMT_CLUSTER:-llmtc}
case "$LLMT_CLUSTER" in
    [a-z]*) [ ${#LLMT_CLUSTER} -le 8 ] && [[ "$LLMT_CLUSTER" =~ ^[a-z][a-z0-9]*$ ]] ||
        { echo "cluster: error: LLMT_CLUSTER=$LLMT_CLUSTER: use 1-8 lowercase letters and digits (interface names are short)" >&2; exit 2; } ;;
    *) echo "cluster: error: LLMT_CLUSTER=$LLMT_CLUSTER: start with a lowercase letter" >&2; exit 2 ;;
esac
CL_DIR=${LLMT_CLUSTER_DIR:-/tmp/llmt-cluster-$LLMT_CLUSTER}
CL_BR=${LLMT_CLUSTER}-br
# a private /24 and ports of our own, from the name (10.77.x.0/24; ctld 29000-29998)
CL_HASH=$(( $(printf '%s' "$LLMT_CLUSTER" | cksum | cut -d' ' -f1) % 200 ))
CL_NET=${LLMT_CLUSTER_NET:-10.77.$((CL_HASH + 20))}
CL_HOST_ADDR=$CL_NET.254
CL_CTLD_PORT=$((29000 + CL_HASH * 4))
CL_SLURMD_PORT=$((CL_CTLD_PORT + 1)) # inside each node's namespace
CL_CTL_HOST=${LLMT_CLUSTER}-ctl

cl_say() { echo "cluster: $*" >&2; }
cl_die() { echo "cluster: error: $1" >&2; exit "${2:-1}"; }
cl_netns() { echo "${LLMT_CLUSTER}-n$1"; }
# cl_nodes: the node numbers of the cluster that is up (from its saved size)
cl_nodes() { [ -f "$CL_DIR/nodes" ] && seq 1 "$(cat "$CL_DIR/nodes")"; }

# cl_can_namespace: empty when this machine lets us make namespaces and a bridge, else the reason
cl_can_namespace() {
    local t
    [ "$(id -u)" -eq 0 ] || { echo "creating network namespaces needs root (uid $(id -u))"; return; }
    for t in ip nsenter unshare slurmctld slurmd munged sinfo; do
        command -v "$t" >/dev/null || { echo "$t is not installed (make deps installs Slurm and munge; iproute2, util-linux)"; return; }
    done
    local probe=${LLMT_CLUSTER}-probe msg
    if ! msg=$(ip netns add "$probe" 2>&1); then echo "cannot create a network namespace: $msg"; return; fi
    if ! msg=$(nsenter --net="/var/run/netns/$probe" unshare --uts true 2>&1); then
        ip netns del "$probe" 2>/dev/null; echo "cannot enter a network namespace with its own hostname: $msg"; return; fi
    ip netns del "$probe" 2>/dev/null
    if ! msg=$(ip link add "${LLMT_CLUSTER}-pb" type bridge 2>&1); then echo "cannot create a bridge: $msg"; return; fi
    ip link del "${LLMT_CLUSTER}-pb" 2>/dev/null
}

# cl_start_slurmd K: node K's slurmd, in the background: only the node's network namespace is
# entered (not `ip netns exec`, which remounts /sys without the cgroup v1 hierarchy), then a UTS
# namespace with its hostname; its config directory is $CL_DIR/conf/nK (up.sh writes it)
cl_start_slurmd() {
    local d=$CL_DIR/conf/n$1
    SLURM_CONF=$d/slurm.conf nsenter --net="/var/run/netns/$(cl_netns "$1")" \
        unshare --uts sh -c "hostname n$1 && exec slurmd -D -N n$1 -f $d/slurm.conf" \
        >>"$CL_DIR/log/slurmd-n$1.out" 2>&1 </dev/null &
}

# cl_node_ns K SCRIPT: the namespace of node K of the cluster that is up; exit 2 with SCRIPT's usage
# when K is not a node number or the node has no namespace
cl_node_ns() {
    [[ "$1" =~ ^[0-9]+$ ]] || cl_die "usage: $2 K (a node number, 1..N)" 2
    local ns
    ns=$(cl_netns "$1")
    ip netns list | awk '{print $1}' | grep -qx "$ns" || cl_die "node $1 is not up (no namespace $ns)" 2
    echo "$ns"
}
