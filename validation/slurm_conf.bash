# slurm_conf.bash — the one writer of the test Slurms' slurm.conf, sourced by
# validation/e2e/lib_slurm.bash (one node on localhost) and validation/cluster/up.sh (N emulated
# nodes in network namespaces). The lines both need are written here; what differs comes in:
#   slurm_conf_write FILE DIR CLUSTER CTL_HOST CTLD_PORT SLURMD_PORT SLURMD_TIMEOUT [CRED_EXPIRE]
# DIR holds state/, spool/, log/, run/ and munge/munge.socket; CTL_HOST is SlurmctldHost's value
# ("host" or "host(addr)"); CRED_EXPIRE (seconds, munge credentials) only when given. The caller's
# own lines (nodes, partition, job ids) come on stdin and are appended.
# Both Slurms run jobs as root with MpiDefault=pmix, proctrack/linuxproc, no cgroups and no
# accounting; node CPUs are claimed, not measured (config_overrides), so a test job may ask for
# more ranks than the machine has cores.

slurm_conf_write() {
    local file=$1 dir=$2 cluster=$3 ctl=$4 ctld_port=$5 slurmd_port=$6 slurmd_timeout=$7
    local auth="socket=$dir/munge/munge.socket"
    [ -z "${8:-}" ] || auth="$auth,cred_expire=$8"
    {
        cat <<CONF
ClusterName=$cluster
SlurmctldHost=$ctl
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=$auth
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
JobRequeue=1
MinJobAge=600
KillWait=10
InactiveLimit=0
MessageTimeout=20
SlurmctldTimeout=30
SlurmdTimeout=$slurmd_timeout
CONF
        cat
    } >"$file"
}

# munge_key_make DIR: a fresh 1 KiB munge key in DIR (mode 700, key 400), as munged requires
munge_key_make() {
    mkdir -p "$1"
    dd if=/dev/urandom of="$1/munge.key" bs=1024 count=1 status=none
    chmod 700 "$1" && chmod 400 "$1/munge.key"
}
