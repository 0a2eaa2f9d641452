#!/usr/bin/env bash
# OpenMP threads follow llmtrain's binding, whatever OMP_PLACES / OMP_PROC_BIND say. With the
# modulefile's OMP_PROC_BIND=close OMP_PLACES=cores and a launcher that binds nothing
# (mpirun --bind-to none, as docs/cluster.md recommends), libgomp pins every rank's initial thread to
# core 0 before main; llmtrain must still give each rank its own cores, run one OpenMP thread per
# core on them, and say so in its placement table. Checked from the tables of ./llmtrain runs:
#  1. 2 ranks, OMP_NUM_THREADS unset.
#  2. 4 ranks (dp = 4), OMP_NUM_THREADS unset.
#     For both: when the node has at least as many cores as ranks, the ranks' cores are
#     disjoint, each rank runs one thread per core of its own and each thread is on its own
#     core of the rank; otherwise (oversubscribed) each rank has one core, the ranks are spread
#     round robin (at most ceil(ranks/cores) per core, not all on core 0), each rank's threads
#     are on its core, and the table says oversubscribed. This 2-core VM checks disjointness
#     with 2 ranks and the spreading with 4; a node with >= 4 cores checks disjointness twice.
#  3. 1 rank, OMP_NUM_THREADS unset: one thread per core of the node, each on its own core.
#  4. OMP_NUM_THREADS larger than a rank's cores is respected, and the table warns.
#  5. the placement unit tests under the same variables, without a launcher binding and with one
#     (--bind-to core: "kept launcher binding", the launcher's core, not the runtime's place 0).
#  6. the README's launch, `mpirun -np 1` with no binding option: Open MPI binds a job of <= 2
#     ranks to one core each by default; llmtrain replaces that binding by the rank's share (the
#     whole node for 1 rank), one thread per core, and its summary says why; the MFU line names
#     rank 0's cores. With OMP_NUM_THREADS = 2 the two threads are pinned to two cores, not left
#     to float; with OMP_NUM_THREADS = 1 a note says a core has no thread.
#  7. a binding asked for (`--bind-to core`) is kept, with a warning that names --bind-to none.
#  (6 and 7 need a node of >= 2 cores.)
# LLMTRAIN=path runs another build (e.g. an older one, to see this test fail there).
source "$(dirname "$0")/lib.bash"
LLMTRAIN=${LLMTRAIN:-./llmtrain}
[ -x "$LLMTRAIN" ] || fail "$LLMTRAIN is missing (make builds it)"
export OMP_PROC_BIND=close OMP_PLACES=cores
unset OMP_NUM_THREADS
CORES=$(hwloc-calc -N core all 2>/dev/null)
[ "${CORES:-0}" -gt 0 ] || CORES=$(hwloc-calc -N pu all 2>/dev/null) || CORES=$(nproc)

# expand "0-2,5" to "0 1 2 5"
expand() {
    echo "$1" | tr ',' '\n' | awk -F- '{b = NF > 1 ? $2 : $1; for (i = $1; i <= b; i++) printf "%d ", i}'
}

# table RUN: the rows of the first placement table of run RUN (its indented lines after
# "placement:"; the grid table follows it)
table() {
    awk '/^placement:/ {n++; on = n == 1; next} !/^  / {on = 0} on && $1 ~ /^[0-9]+$/' "$TEST_DIR/$1.log"
}
# rows RUN: "rank|cores|n_threads|thread cores|binding" per row
rows() {
    table "$1" | sed -E 's/^ +([0-9]+) +[^ ]+ +[0-9]+ +([^ ]+) .* ([0-9]+) on cores? ([^ ]+)  (.*)$/\1|\2|\3|\4|\5/'
}

# run NAME RANKS [key=value ...]: a few steps of the tiny model on RANKS ranks, unbound
run() {
    local name=$1 np=$2; shift 2
    write_tiny_nml "$TEST_DIR/$name.nml" name="$name" max_steps=3 val_every=0 dp="$np" \
        gb=$((4 * np)) "$@"
    # stdout alone: another rank's warning on stderr must not land inside the table
    $MPIRUN --bind-to none -np "$np" "$LLMTRAIN" "$TEST_DIR/$name.nml" >"$TEST_DIR/$name.log" \
        2>"$TEST_DIR/$name.err" || { cat "$TEST_DIR/$name.log" "$TEST_DIR/$name.err"; fail "$name: llmtrain failed"; }
    sed -n '/^placement:/,/^grid:/p' "$TEST_DIR/$name.log" | grep -v '^grid:'
}

# check_ranks NAME RANKS: the ranks' cores are disjoint (enough cores) or spread (oversubscribed)
check_ranks() {
    local name=$1 np=$2 rank cores c seen=" " count=" " most per
    [ "$(table "$name" | wc -l)" -eq "$np" ] || fail "$name: the table does not have $np rows"
    while read -r rank cores; do
        if [ "$CORES" -ge "$np" ]; then
            for c in $(expand "$cores"); do
                [[ $seen == *" $c "* ]] && fail "$name: core $c is in two ranks' bindings (rank $rank: $cores)"
                seen="$seen$c "
            done
        else
            [ "$(expand "$cores" | wc -w)" -eq 1 ] ||
                fail "$name: oversubscribed rank $rank has cores $cores, want one"
            count="$count$cores "
        fi
    done < <(table "$name" | awk '{print $1, $4}')
    [ "$CORES" -ge "$np" ] && return 0
    most=$(((np + CORES - 1) / CORES))
    per=$(echo $count | tr ' ' '\n' | sort | uniq -c | sort -n | tail -1 | awk '{print $1, $2}')
    [ "${per% *}" -le "$most" ] ||
        fail "$name: ${per% *} ranks on core ${per#* } (cores:$count), want at most $most per core"
    grep -q "note: .* runs $np ranks on $CORES cores (oversubscribed)" "$TEST_DIR/$name.log" ||
        fail "$name: no oversubscription note"
}

# check_threads NAME RANKS: each rank runs one thread per core of its own, each on its own core
check_threads() {
    local name=$1 np=$2 rank cores n list binding t mine threads
    [ "$(rows "$name" | grep -c '|')" -eq "$np" ] ||
        fail "$name: the table has no threads column ('N on cores LIST') for $np ranks"
    while IFS='|' read -r rank cores n list binding; do
        case $binding in "bound by llmtrain"*) ;; *) fail "$name: rank $rank: binding '$binding'" ;; esac
        if [ "$CORES" -lt "$np" ] && [[ $binding != *oversubscribed* ]]; then
            fail "$name: rank $rank: '$binding' does not say oversubscribed"
        fi
        [[ $list == *[* ]] && fail "$name: rank $rank: a thread is not pinned to one core: $list"
        mine=" $(expand "$cores")" threads=" $(expand "$list")"
        [ "$(echo $threads | wc -w)" -eq "$n" ] || fail "$name: rank $rank: '$n on cores $list'"
        [ "$n" -eq "$(echo $mine | wc -w)" ] ||
            fail "$name: rank $rank runs $n threads on cores $cores, want one per core"
        for t in $threads; do
            [[ $mine == *" $t "* ]] || fail "$name: rank $rank: a thread is on core $t, outside its cores $cores"
        done
        [ "$(echo $threads | tr ' ' '\n' | sort -u | wc -l)" -eq "$n" ] ||
            fail "$name: rank $rank: threads share cores: $list"
    done < <(rows "$name")
}

for np in 2 4; do
    run ranks$np $np
    check_ranks ranks$np $np
    check_threads ranks$np $np
done
run one 1
check_threads one 1

# 4. an explicit OMP_NUM_THREADS is respected, with a warning when it exceeds the cores
OMP_NUM_THREADS=$((CORES + 1)) run explicit 1
IFS='|' read -r _ _ n _ _ < <(rows explicit)
[ "$n" = $((CORES + 1)) ] || fail "explicit: OMP_NUM_THREADS=$((CORES + 1)) ran $n threads"
grep -q "warning: OMP_NUM_THREADS asks for $((CORES + 1)) threads, more than the $CORES core" \
    "$TEST_DIR/explicit.log" || fail "explicit: no warning that OMP_NUM_THREADS exceeds the cores"

# 5. the unit tests under the same variables, unbound and bound by the launcher
BIN=build/tests/test_topology
[ -x $BIN ] || fail "$BIN is missing (make tests builds it)"
$MPIRUN --bind-to none -np 2 $BIN >$TEST_DIR/unit_unbound.log 2>&1 ||
    { cat $TEST_DIR/unit_unbound.log; fail "unit tests, --bind-to none: failed"; }
if [ "$CORES" -ge 2 ]; then
    $MPIRUN --bind-to core -np 2 $BIN >$TEST_DIR/unit_bound.log 2>&1 ||
        { cat $TEST_DIR/unit_bound.log; fail "unit tests, --bind-to core: failed"; }
    n=$(grep -c "aggregator .: kept launcher binding" $TEST_DIR/unit_bound.log)
    [ "$n" -eq 2 ] || fail "--bind-to core: $n of 2 ranks report 'kept launcher binding'"
fi
# launch NAME ARGS...: one rank of the tiny model started as `$MPIRUN ARGS... -np 1 llmtrain`
launch() {
    local name=$1; shift
    write_tiny_nml "$TEST_DIR/$name.nml" name="$name" max_steps=2 val_every=0 dp=1 gb=4
    $MPIRUN "$@" -np 1 "$LLMTRAIN" "$TEST_DIR/$name.nml" >"$TEST_DIR/$name.log" 2>"$TEST_DIR/$name.err" ||
        { cat "$TEST_DIR/$name.log" "$TEST_DIR/$name.err"; fail "$name: llmtrain failed"; }
    sed -n '/^placement:/,/^grid:/p;/^MFU and GEMM/p' "$TEST_DIR/$name.log" | grep -v '^grid:'
}
if [ "$CORES" -ge 2 ]; then
    # 6. the README's launch: the launcher's default binding (one core) replaced by the share
    launch readme
    IFS='|' read -r _ cores n list binding < <(rows readme)
    [ "$(expand "$cores" | wc -w)" -eq "$CORES" ] || fail "readme: rank 0 has cores $cores, want all $CORES"
    [[ $binding == "bound by llmtrain (the launcher's default binding, 1 core, replaced)" ]] ||
        fail "readme: binding '$binding', want the default binding replaced"
    [ "$n" -eq "$CORES" ] && [[ $list != *[* ]] || fail "readme: threads '$n on cores $list', want one per core"
    grep -q "cores: $CORES per rank (rank 0): the rank's even share of the node's $CORES cores among 1 rank; the launcher's own default binding (1 core, not asked for) replaced" \
        "$TEST_DIR/readme.log" || fail "readme: the summary does not say why rank 0 has $CORES cores"
    grep -q "^MFU and GEMM in the step lines are per rank: .* measured on rank 0's $CORES cores ($cores) with $CORES OpenMP threads" \
        "$TEST_DIR/readme.log" || fail "readme: the MFU line does not name rank 0's cores"
    OMP_NUM_THREADS=2 launch readme_omp2
    IFS='|' read -r _ cores n list binding < <(rows readme_omp2)
    [ "$n" -eq 2 ] && [[ $list != *[* ]] && [ "$(expand "$list" | tr ' ' '\n' | sort -u | wc -w)" -eq 2 ] ||
        fail "readme_omp2: OMP_NUM_THREADS=2 gave threads '$n on cores $list', want 2 pinned to 2 cores"
    OMP_NUM_THREADS=1 launch readme_omp1
    grep -q "note: OMP_NUM_THREADS = 1 runs 1 pinned thread on rank 0's $CORES cores: $((CORES - 1)) core" \
        "$TEST_DIR/readme_omp1.log" || fail "readme_omp1: no note that cores have no thread"
    # 7. asked for: kept, and a warning naming the flag that fixes it
    launch asked --bind-to core
    IFS='|' read -r _ cores n list binding < <(rows asked)
    [ "$binding" = "kept launcher binding" ] && [ "$(expand "$cores" | wc -w)" -eq 1 ] ||
        fail "asked: --bind-to core gave '$binding' on cores $cores, want it kept (one core)"
    grep -q "warning: .*: $((CORES - 1)) of its $CORES cores idle: the binding asked of the launcher (mpirun --bind-to core) is kept; launch with mpirun --bind-to none" \
        "$TEST_DIR/asked.log" || fail "asked: no warning naming --bind-to none"
fi
echo "thread_binding: OpenMP threads on each rank's own cores in every case ($CORES cores here)"
