#!/usr/bin/env bash
# up.sh [N] — an emulated Slurm cluster of N nodes (default 4) on this machine, for trying the
# multi-node jobscripts: each node a Linux network namespace with its own hostname (nK, a UTS
# namespace) and address ($CL_NET.K) on a private bridge, one real slurmd per node registered with
# one slurmctld (munge shared). Open MPI goes between nodes over TCP on the bridge only, shared
# memory within a node; jobs launch with `srun --mpi=pmix`. Traffic never leaves the machine.
#
#   eval "$(validation/cluster/up.sh 4)"    # then sbatch/srun/squeue/sinfo talk to it
#   validation/cluster/kill-node.sh 3       # node 3 dies as a crashed node does (SIGKILL all)
#   validation/cluster/kill-node.sh --link 3  # or its link is cut (veth down; it runs on, unreachable)
#   validation/cluster/revive-node.sh 3     # node 3 comes back (its slurmd starts again)
#   validation/cluster/down.sh              # stops everything, removes namespaces and bridge
#
# Prints shell assignments (SLURM_CONF, OMPI_MCA_*) on stdout; progress goes to stderr.
# Exit 77 with the reason when this machine cannot make namespaces (not root, no iproute2, ...);
# exit 2 on bad input; 1 when a daemon does not come up (what it logged is shown, and what was
# started is stopped again). LLMT_CLUSTER=name (default llmtc) runs a second cluster beside it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.bash"
source "$HERE/../slurm_conf.bash"

N=${1:-4}
[[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 64 ] || cl_die "up.sh N: N = '$N' is not a node count from 1 to 64" 2
reason=$(cl_can_namespace)
[ -z "$reason" ] || { echo "cluster: cannot start here: $reason" >&2; exit 77; }
if [ -e "$CL_DIR/nodes" ] || ip link show "$CL_BR" >/dev/null 2>&1; then
    cl_die "cluster '$LLMT_CLUSTER' is already up (or left over): run validation/cluster/down.sh first" 2
fi

# anything that fails from here on takes the half-made cluster down again
trap 'rc=$?; [ $rc -eq 0 ] || { cl_say "up.sh failed (exit $rc): taking it down"; "$HERE/down.sh" >&2 || true; }' EXIT

rm -rf "$CL_DIR"
mkdir -p "$CL_DIR"/{state,spool,log,run,munge,conf,pmix}
echo "$N" >"$CL_DIR/nodes"

# --- the network: a bridge with the host at .254, one veth pair per node ---
ip link add "$CL_BR" type bridge
ip addr add "$CL_HOST_ADDR/24" dev "$CL_BR"
ip link set "$CL_BR" up
for k in $(seq 1 "$N"); do
    ns=$(cl_netns "$k")
    ip netns add "$ns"
    ip link add "${LLMT_CLUSTER}-v$k" type veth peer name "${LLMT_CLUSTER}-p$k"
    ip link set "${LLMT_CLUSTER}-v$k" master "$CL_BR" up
    ip link set "${LLMT_CLUSTER}-p$k" netns "$ns"
    ip -n "$ns" link set "${LLMT_CLUSTER}-p$k" name eth0
    ip -n "$ns" addr add "$CL_NET.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done
cl_say "network: bridge $CL_BR $CL_NET.0/24, host $CL_HOST_ADDR, nodes n1..n$N = $CL_NET.1..$CL_NET.$N"

# --- munge: one key, one munged; its socket is a file, so every namespace reaches it ---
munge_key_make "$CL_DIR/munge"
munged --force --key-file="$CL_DIR/munge/munge.key" --socket="$CL_DIR/munge/munge.socket" \
    --pid-file="$CL_DIR/run/munged.pid" --log-file="$CL_DIR/log/munged.log" \
    --seed-file="$CL_DIR/munge/munged.seed" >"$CL_DIR/log/munged.out" 2>&1 ||
    cl_die "munged did not start: $(tail -2 "$CL_DIR/log/munged.log" "$CL_DIR/log/munged.out" 2>/dev/null | tr '\n' ' ')"
for _ in $(seq 50); do [ -S "$CL_DIR/munge/munge.socket" ] && break; sleep 0.1; done
[ -S "$CL_DIR/munge/munge.socket" ] || cl_die "munged made no socket: $(tail -2 "$CL_DIR/log/munged.log")"

# --- slurm.conf: node CPUs are claimed, not measured (config_overrides): an 8-rank 3D job
# fits on 2 nodes of this small machine; llmtrain then shares the real cores among the ranks.
# cred_expire=30 (default 120): a requeued job may start again after this many seconds ---
cpus=${LLMT_CLUSTER_CPUS:-4}
mem=$(awk -v n="$N" '/MemTotal/ {m = int($2 / 1024 * 0.8 / n); print (m < 500 ? 500 : m)}' /proc/meminfo)
slurm_conf_write "$CL_DIR/slurm.conf" "$CL_DIR" "$LLMT_CLUSTER" "$CL_CTL_HOST($CL_HOST_ADDR)" \
    "$CL_CTLD_PORT" "$CL_SLURMD_PORT" 30 30 <<CONF
FirstJobId=$((7000 + CL_HASH * 100))
TreeWidth=64
NodeName=n[1-$N] NodeAddr=$CL_NET.[1-$N] CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem State=UNKNOWN
PartitionName=cluster Nodes=n[1-$N] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
[ "$N" -gt 1 ] || sed -i "s/n\[1-1\]/n1/g; s/$CL_NET\.\[1-1\]/$CL_NET.1/" "$CL_DIR/slurm.conf"

# --- slurmctld on the host's bridge address, in a UTS namespace named as SlurmctldHost says ---
unshare --uts sh -c "hostname $CL_CTL_HOST && exec slurmctld -D -i -f $CL_DIR/slurm.conf" \
    >"$CL_DIR/log/slurmctld.out" 2>&1 </dev/null &
echo $! >"$CL_DIR/run/slurmctld.launch.pid"

# --- one slurmd per node: only the node's network namespace is entered (not `ip netns exec`,
# which remounts /sys without the cgroup v1 hierarchy), then its own hostname. Each slurmd has
# its own copy of the config directory: its mpi.conf gives the PMIx plugin a per-node temporary
# base (/tmp/spmix_appdir_<uid>_<job>.<step> would collide between nodes sharing /tmp) ---
for k in $(seq 1 "$N"); do
    d=$CL_DIR/conf/n$k
    mkdir -p "$d" "$CL_DIR/pmix/n$k" "$CL_DIR/spool/n$k"
    cp "$CL_DIR/slurm.conf" "$d/slurm.conf"
    echo "PMIxCliTmpDirBase=$CL_DIR/pmix/n$k" >"$d/mpi.conf"
    cl_start_slurmd "$k"
done

export SLURM_CONF=$CL_DIR/slurm.conf
state=""
for _ in $(seq 300); do
    state=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [ "$(echo "$state" | grep -o ' idle' | wc -l)" -eq "$N" ] && break
    sleep 0.2
done
if [ "$(echo "$state" | grep -o ' idle' | wc -l)" -ne "$N" ]; then
    cl_die "not all $N nodes came up idle within 60 s (sinfo: ${state:-no answer}); slurmctld: $(tail -3 "$CL_DIR/log/slurmctld.log" 2>/dev/null | tr '\n' ' '); slurmd: $(tail -q -n 2 "$CL_DIR"/log/slurmd-n*.out "$CL_DIR"/log/slurmd-n*.log 2>/dev/null | tail -4 | tr '\n' ' ')"
fi
cl_say "up: $N nodes idle (${state% }); logs in $CL_DIR/log; stop with validation/cluster/down.sh"

# the assignments that point the clients and Open MPI at the cluster (for eval). The nodes share
# this machine's cores: ranks that busy-poll starve the others (an 8-rank 3D job on 2 cores took
# 90 s per checkpoint and hung at the end), so a waiting rank yields (mpi_yield_when_idle).
cat <<ENV
export LLMT_CLUSTER=$LLMT_CLUSTER;
export SLURM_CONF=$CL_DIR/slurm.conf;
export OMPI_MCA_btl=self,vader,tcp;
export OMPI_MCA_btl_tcp_if_include=$CL_NET.0/24;
export OMPI_MCA_oob_tcp_if_include=$CL_NET.0/24;
export OMPI_MCA_pml=ob1;
export OMPI_MCA_mpi_yield_when_idle=1;
ENV
