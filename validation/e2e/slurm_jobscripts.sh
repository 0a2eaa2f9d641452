#!/usr/bin/env bash
# The jobscripts as shipped, under a real Slurm (a private one on localhost: lib_slurm.bash):
# single_node.sbatch takes its task count from the namelist's grid and its CPUs from the node
# and trains; a --ntasks that disagrees with the grid stops before anything is written, with the
# fix; multi_node_3d.sbatch runs the 8-rank 3D input and multi_node_dp.sbatch a dp = 2 run (on the
# one node here); a module that cannot be loaded is shown and ends the job with exit 2;
# scaling_study.sbatch runs an llmscale study as job steps. llmtrain comes from PATH, as after
# module load.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_slurm.bash"
[ -x ./llmtrain ] || fail "./llmtrain is not built (make)"
slurm_start
export PATH=$PWD:$PATH
unset LLMTRAIN_HOME LLMT_BIN
write_tiny_nml "$TEST_DIR/tiny.nml" name=single max_steps=6 val_every=0 val_files=''

# 1. one node, the grid from the command line: 2 ranks, the node's CPUs shared between them
jid=$(sbatch --parsable --output="$TEST_DIR/single-%j.out" jobscripts/single_node.sbatch \
      "$TEST_DIR/tiny.nml" parallel.dp=2) || fail "sbatch refused single_node.sbatch"
state=$(slurm_wait "$jid" 180); out=$TEST_DIR/single-$jid.out
[ "$state" = COMPLETED ] || { cat "$out"; fail "single_node: job $jid ended $state (exit $(slurm_exit_code "$jid"))"; }
grep -q "= 2 ranks on 1 node(s): 2 ranks per node" "$out" || { cat "$out"; fail "single_node: no allocation line"; }
[ "$(grep -c '"step":[0-9]*,"loss"' "$TEST_DIR/single/metrics.jsonl")" -eq 6 ] || fail "single_node: not 6 step records"
grep -q "2 MPI ranks" "$out" || fail "single_node: llmtrain did not run on 2 ranks"
echo "single_node: job $jid COMPLETED, 2 ranks, 6 steps"

# 2. --ntasks against the grid: exit 2 with the fix, no run directory
jid=$(sbatch --parsable --ntasks=3 --output="$TEST_DIR/mismatch-%j.out" jobscripts/single_node.sbatch \
      "$TEST_DIR/tiny.nml" parallel.dp=2 run.name=mismatch)
state=$(slurm_wait "$jid" 120); out=$TEST_DIR/mismatch-$jid.out
[ "$(slurm_exit_code "$jid")" = 2 ] || { cat "$out"; fail "mismatch: exit $(slurm_exit_code "$jid") ($state), expected 2"; }
grep -q "the job has 3 tasks but &parallel dp\*tp\*pp = 2\*1\*1 = 2 ranks: submit with --ntasks=2" "$out" ||
    { cat "$out"; fail "mismatch: no message naming the fix"; }
[ ! -e "$TEST_DIR/mismatch" ] || fail "mismatch: a run directory was created"
echo "mismatch: exit 2: $(grep error "$out")"

# 3. the 3D input as shipped (dp 2 x tp 2 x pp 2 = 8 ranks), on the one node there is
jid=$(sbatch --parsable --nodes=1 --output="$TEST_DIR/3d-%j.out" jobscripts/multi_node_3d.sbatch \
      inputs/3d-8rank.nml train.max_steps=3 data.val_every=0 run.out_dir="'$TEST_DIR'" \
      model.d_model=64 model.d_ff=256 model.seq_len=32) # a smaller model: 8 ranks share 2 cores here
state=$(slurm_wait "$jid" 600); out=$TEST_DIR/3d-$jid.out
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "3d: job $jid ended $state (exit $(slurm_exit_code "$jid"))"; }
grep -q "2\*2\*2 = 8 ranks on 1 node(s): 8 ranks per node" "$out" || fail "3d: no allocation line"
[ "$(grep -c '"step":[0-9]*,"loss"' "$TEST_DIR/3d-8rank/metrics.jsonl")" -eq 3 ] || fail "3d: not 3 step records"
echo "3d: job $jid COMPLETED, 8 ranks, 3 steps"

# 3b. the multi-node data-parallel script, on the one node there is
jid=$(sbatch --parsable --nodes=1 --output="$TEST_DIR/dp-%j.out" jobscripts/multi_node_dp.sbatch \
      "$TEST_DIR/tiny.nml" parallel.dp=2 run.name=dp)
state=$(slurm_wait "$jid" 180); out=$TEST_DIR/dp-$jid.out
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "multi_node_dp: job $jid ended $state"; }
[ "$(grep -c '"step":[0-9]*,"loss"' "$TEST_DIR/dp/metrics.jsonl")" -eq 6 ] || fail "multi_node_dp: not 6 step records"
echo "multi_node_dp: job $jid COMPLETED, 6 steps"

# 4. a module that cannot be loaded (llmtrain not on PATH): its error is shown, exit 2
jid=$(env PATH=/usr/bin:/bin LLMTRAIN_MODULE=llmtrain-no-such-version MODULEPATH="$TEST_DIR" \
      sbatch --parsable --output="$TEST_DIR/module-%j.out" jobscripts/single_node.sbatch "$TEST_DIR/tiny.nml")
state=$(slurm_wait "$jid" 120); out=$TEST_DIR/module-$jid.out
[ "$(slurm_exit_code "$jid")" = 2 ] || { cat "$out"; fail "module: exit $(slurm_exit_code "$jid"), expected 2"; }
grep -q "llmtrain-no-such-version" "$out" && grep -q "module load llmtrain-no-such-version failed" "$out" ||
    { cat "$out"; fail "module: the module's error is not shown"; }
echo "module: exit 2, module error shown"
# 4b. a profiling run: timeline, counters (none on a VM: said once, the run goes on), report
[ -x ./llmreport ] || make -s llmreport >/dev/null || fail "make llmreport failed"
jid=$(PROFILE_STEPS=2:4 sbatch --parsable --output="$TEST_DIR/profile-%j.out" jobscripts/profile.sbatch \
      "$TEST_DIR/tiny.nml" parallel.dp=2 run.name=profiled)
state=$(slurm_wait "$jid" 240); out=$TEST_DIR/profile-$jid.out
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "profile: job $jid ended $state (exit $(slurm_exit_code "$jid"))"; }
$PYTHON -c "import json,sys; t=json.load(open(sys.argv[1])); ev=t['traceEvents'] if isinstance(t,dict) else t; \
sys.exit(0 if {e.get('pid') for e in ev if e.get('ph')=='X'} == {0,1} else 1)" "$TEST_DIR/profiled/trace.json" ||
    fail "profile: trace.json lacks the events of both ranks"
[ -s "$TEST_DIR/profiled/report.html" ] || fail "profile: no report.html"
grep -q "papi" "$out" || fail "profile: nothing said about the PAPI counters"
echo "profile: job $jid COMPLETED: trace.json with both ranks, report.html"

# 5. a strong-scaling study inside one allocation (llmscale: one job step per rank count)
jid=$(OUT=$TEST_DIR/scale MAX_RANKS=2 sbatch --parsable --output="$TEST_DIR/scale-%j.out" \
      jobscripts/scaling_study.sbatch "$TEST_DIR/tiny.nml" strong 4)
state=$(slurm_wait "$jid" 300); out=$TEST_DIR/scale-$jid.out
[ "$state" = COMPLETED ] || { tail -30 "$out"; fail "scaling study: job $jid ended $state (exit $(slurm_exit_code "$jid"))"; }
[ "$(grep -c '^dp' "$TEST_DIR/scale/results.csv")" -eq 2 ] || { cat "$TEST_DIR/scale/results.csv"; fail "scaling study: not 2 rows"; }
grep -q -- "--mpi=pmix" "$out" "$TEST_DIR"/scale/runs/*/run.log 2>/dev/null || grep -q "srun" "$TEST_DIR/scale/study.json" ||
    fail "scaling study: the runs were not srun job steps"
echo "scaling study: job $jid COMPLETED, $(grep -c '^dp' "$TEST_DIR/scale/results.csv") rows"
echo "slurm_jobscripts: single node, mismatch, 3D, module error, scaling study: all as expected"
