#!/usr/bin/env bash
# make install PREFIX=... and its modulefile, with the real Lmod: install to a temporary prefix,
# `module use`, `module load llmtrain`, then run the installed tiny example from another
# directory (its data through LLMTRAIN_DATA, set by the module; a command-line override);
# `module help` / `whatis` name the prefix and version; a modulefile whose dependency module
# does not exist fails to load with Lmod's message naming it, and llmtrain stays off PATH.
source "$(dirname "$0")/lib.bash"
LMOD_INIT=/usr/share/lmod/lmod/init/bash
[ -f "$LMOD_INIT" ] || { echo "SKIP: Lmod is not installed (make deps installs it)"; exit 77; }
prefix=$PWD/$TEST_DIR/prefix
make -s install PREFIX="$prefix" >"$TEST_DIR/install.log" 2>&1 || { cat "$TEST_DIR/install.log"; fail "make install failed"; }
version=$(sed -n 's/^#define LLMT_VERSION "\(.*\)"/\1/p' src/core/version.h)
[ -f "$prefix/modulefiles/llmtrain/$version.lua" ] || fail "no modulefile $prefix/modulefiles/llmtrain/$version.lua"
for f in bin/llmtrain bin/llmprep bin/llmmerge bin/llmsweep share/llmtrain/inputs/tiny.nml \
         share/llmtrain/jobscripts/single_node.sbatch share/llmtrain/jobscripts/llmtrain_job.bash \
         share/llmtrain/data/tiny/train_000.bin share/llmtrain/README.md share/llmtrain/docs/namelist.md; do
    [ -e "$prefix/$f" ] || fail "make install did not install $f"
done
# make install PREFIX=relative is refused
make -s install PREFIX=relative/dir >"$TEST_DIR/relative.log" 2>&1 && fail "a relative PREFIX was accepted"
grep -q "PREFIX must be an absolute path" "$TEST_DIR/relative.log" || fail "no message for a relative PREFIX"

elsewhere=$(mktemp -d /tmp/llmt-module-XXXXXX)
trap 'rm -rf "$elsewhere"' EXIT
(
    unset LLMTRAIN_HOME LLMTRAIN_DATA
    source "$LMOD_INIT"
    export PATH=/usr/bin:/bin MODULEPATH=
    module use "$prefix/modulefiles"
    module load llmtrain || exit 11
    [ "$(command -v llmtrain)" = "$prefix/bin/llmtrain" ] || { echo "llmtrain is $(command -v llmtrain)"; exit 12; }
    [ "$LLMTRAIN_HOME" = "$prefix" ] && [ "$LLMTRAIN_DATA" = "$prefix/share/llmtrain/data" ] || exit 13
    module help llmtrain 2>&1 | grep -q "llmtrain $version: MPI-native" || exit 14
    module help llmtrain 2>&1 | grep -q "Installed in $prefix" || exit 14
    module whatis llmtrain 2>&1 | grep -q "Version: $version" || exit 15
    cd "$elsewhere" || exit 16
    $MPIRUN -np 1 llmtrain "$LLMTRAIN_HOME/share/llmtrain/inputs/tiny.nml" train.max_steps=4 \
        data.val_every=0 >run.log 2>&1 || { tail -20 run.log; exit 17; }
    [ "$(grep -c '"step":[0-9]*,"loss"' runs/tiny/metrics.jsonl)" -eq 4 ] || exit 18
    grep -q "$prefix/share/llmtrain/data/tiny/train_" run.log || { grep train_files run.log; exit 19; }
) >"$TEST_DIR/module.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$TEST_DIR/module.log"; fail "module load / run from another directory: step $rc"; }
echo "installed in $prefix; module load llmtrain put $prefix/bin on PATH; the tiny example trained 4 steps from $elsewhere"

# a dependency module that does not exist: module load fails naming it; llmtrain not on PATH
make -s install PREFIX="$prefix-dep" MODULE_DEPENDS="llmt-no-such-mpi/9.9" >>"$TEST_DIR/install.log" 2>&1 || fail "make install (dep) failed"
(
    source "$LMOD_INIT"
    export PATH=/usr/bin:/bin MODULEPATH=
    module use "$prefix-dep/modulefiles"
    module load llmtrain && exit 21
    command -v llmtrain && exit 22
    exit 0
) >"$TEST_DIR/dep.log" 2>&1 || { cat "$TEST_DIR/dep.log"; fail "a missing dependency module was not an error"; }
grep -q "llmt-no-such-mpi" "$TEST_DIR/dep.log" || { cat "$TEST_DIR/dep.log"; fail "Lmod's message does not name the missing module"; }
echo "missing dependency: $(grep -m1 -i "llmt-no-such-mpi" "$TEST_DIR/dep.log" | head -c 160)"
echo "install_module: make install, Lmod module load/help/whatis, run from elsewhere, missing dependency refused"
