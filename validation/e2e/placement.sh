#!/usr/bin/env bash
# Placement (src/parallel/topology.c) under mpirun, three ways, each checked against the rule
# worked out by hand:
#  1. this machine, 4 ranks: the unit tests pass on every rank; the table has ranks 0-3 in
#     order, one I/O aggregator (rank 0), and the oversubscription note when 4 > cores.
#  2. a made-up GPU node (hwloc XML: 2 sockets x 1 core, 2 GPUs per socket, each GPU seen as
#     card/renderD/cuda devices), 4 ranks: cores 0,1,0,1, NUMA 0,1,0,1, and one GPU each from
#     the rank's own socket: cuda0, cuda2, cuda1, cuda3 (one entry per GPU, the cuda name).
#  3. binding refused (sched_setaffinity fails with EPERM, as in some containers): the run
#     carries on and every rank reports "not permitted: Operation not permitted".
source "$(dirname "$0")/lib.bash"
BIN=build/tests/test_topology
[ -x $BIN ] || fail "$BIN is missing (make tests builds it)"

# first placement table of a log: the rows only, as "rank cores numa gpu"
table_rows() {
    awk '/^placement:/ {n++} n == 1 && $1 ~ /^[0-9]+$/ {print $1, $4, $5, $6}' "$1"
}

# 1. this machine
$MPIRUN -np 4 $BIN >$TEST_DIR/here.log 2>&1 || { cat $TEST_DIR/here.log; fail "4 ranks: unit tests failed"; }
sed -n '/^placement:/,/^\[/p' $TEST_DIR/here.log | head -8
[ "$(table_rows $TEST_DIR/here.log | awk '{print $1}' | tr '\n' ' ')" = "0 1 2 3 " ] ||
    fail "4 ranks: the table does not list ranks 0-3 in order"
aggr=$(awk '/^placement:/ {n++} n == 1 && $1 ~ /^[0-9]+$/ && / yes /' $TEST_DIR/here.log | awk '{print $1}' | tr '\n' ' ')
[ "$aggr" = "0 " ] || fail "4 ranks on one node: aggregators are '$aggr', want rank 0 only"
if [ "$(nproc)" -lt 4 ]; then grep -q "note: .* runs 4 ranks on" $TEST_DIR/here.log || fail "no oversubscription note"; fi

# 2. a made-up GPU node; the launcher must not bind (--bind-to none) so the rule is ours
cat >$TEST_DIR/gpu_node.xml <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3" local_memory="4294967296"/>
      <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
      </object>
      <object type="Bridge" gp_index="6" bridge_type="0-1" depth="0" bridge_pci="0000:[17-18]">
        <object type="PCIDev" gp_index="7" pci_busid="0000:17:00.0" pci_type="0302 [10de:2335] [10de:18be] a1" pci_link_speed="0.000000">
          <object type="OSDev" gp_index="8" name="card0" osdev_type="1"/>
          <object type="OSDev" gp_index="9" name="renderD128" osdev_type="1"/>
          <object type="OSDev" gp_index="10" name="cuda0" osdev_type="5" subtype="CUDA"/>
        </object>
        <object type="PCIDev" gp_index="11" pci_busid="0000:18:00.0" pci_type="0302 [10de:2335] [10de:18be] a1" pci_link_speed="0.000000">
          <object type="OSDev" gp_index="12" name="card1" osdev_type="1"/>
          <object type="OSDev" gp_index="13" name="cuda1" osdev_type="5" subtype="CUDA"/>
        </object>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="14">
      <object type="NUMANode" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="15" local_memory="4294967296"/>
      <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="16">
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="17"/>
      </object>
      <object type="Bridge" gp_index="18" bridge_type="0-1" depth="0" bridge_pci="0000:[97-98]">
        <object type="PCIDev" gp_index="19" pci_busid="0000:97:00.0" pci_type="0302 [10de:2335] [10de:18be] a1" pci_link_speed="0.000000">
          <object type="OSDev" gp_index="20" name="card2" osdev_type="1"/>
          <object type="OSDev" gp_index="21" name="cuda2" osdev_type="5" subtype="CUDA"/>
        </object>
        <object type="PCIDev" gp_index="22" pci_busid="0000:98:00.0" pci_type="0302 [10de:2335] [10de:18be] a1" pci_link_speed="0.000000">
          <object type="OSDev" gp_index="23" name="card3" osdev_type="1"/>
          <object type="OSDev" gp_index="24" name="cuda3" osdev_type="5" subtype="CUDA"/>
        </object>
      </object>
    </object>
  </object>
</topology>
XML
# HWLOC_THISSYSTEM=1: the XML stands for this machine, so binding really happens (on CPUs 0, 1)
$MPIRUN --bind-to none -np 4 -x HWLOC_XMLFILE=$TEST_DIR/gpu_node.xml -x HWLOC_THISSYSTEM=1 $BIN \
    >$TEST_DIR/gpu.log 2>&1 || { cat $TEST_DIR/gpu.log; fail "made-up GPU node: unit tests failed"; }
sed -n '/^placement:/,/^\[/p' $TEST_DIR/gpu.log | head -8
got=$(table_rows $TEST_DIR/gpu.log | awk '{print $1 ":" $2 ":" $3 ":" $4}' | tr '\n' ' ')
want="0:0:0:cuda0 1:1:1:cuda2 2:0:0:cuda1 3:1:1:cuda3 "
[ "$got" = "$want" ] || fail "made-up GPU node: rank:cores:numa:gpu are '$got', want '$want'"

# 3. binding refused
cat >$TEST_DIR/deny.c <<'C'
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
/* sched_setaffinity as a container without the permission answers it */
int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *mask) {
    (void)pid, (void)size, (void)mask;
    errno = EPERM;
    return -1;
}
C
${CC_HOST:-cc} -shared -fPIC -o $TEST_DIR/deny.so $TEST_DIR/deny.c || fail "cannot build the EPERM shim"
$MPIRUN --bind-to none -np 2 -x LD_PRELOAD=$PWD/$TEST_DIR/deny.so $BIN >$TEST_DIR/deny.log 2>&1 ||
    { cat $TEST_DIR/deny.log; fail "binding refused: unit tests failed (placement must carry on)"; }
sed -n '/^placement:/,/^\[/p' $TEST_DIR/deny.log | head -4
# the table's rows only (they begin with the rank number): the unit tests' own "  rank 1: ...
# not permitted" lines of the other rank can land between the table and the next one
n=$(awk '/^placement:/ {n++} n == 1 && $1 ~ /^[0-9]+$/ && /not permitted: Operation not permitted/' $TEST_DIR/deny.log | wc -l)
[ "$n" -eq 2 ] || fail "binding refused: $n of 2 ranks report 'not permitted: Operation not permitted'"
echo "placement: all three cases as expected"
