#!/usr/bin/env bash
# Provenance in every artefact (2 ranks, tiny model, 4 steps, a checkpoint at step 4), with
# Slurm's and Lmod's variables set for the ranks:
#  - run.json: commit = `git rev-parse HEAD` (when this is a git checkout), dirty a boolean (null
#    without git), hosts = [`hostname`], rank_hosts = one per rank, world_size 2, the Slurm job
#    id / step / restart count and LOADEDMODULES as set, HDF5's version = pkg-config's, MPI's from
#    the library, build_date ISO 8601, the namelist = the checkpoint's /config attribute;
#  - metrics.jsonl: the first record is {"kind":"provenance", the same members, "step":0};
#  - the checkpoint and the weights file: a group /provenance with one string attribute per field
#    equal to run.json's values (as text), h5py reading them;
#  - the Makefile's compiled-in part outside a git checkout: commit and dirty "unknown".
source "$(dirname "$0")/lib.bash"
write_tiny_nml "$TEST_DIR/p.nml" name=p max_steps=4 dp=2 val_every=0
printf '&checkpoint\n  every = 2\n/\n' >>"$TEST_DIR/p.nml"
timeout 120 $MPIRUN -np 2 env SLURM_JOB_ID=4242 SLURM_STEP_ID=7 SLURM_RESTART_COUNT=1 \
    LOADEDMODULES="gcc/12.2:openmpi/4.1.4:hdf5/1.10" ./llmtrain "$TEST_DIR/p.nml" >"$TEST_DIR/p.log" 2>&1 ||
    { tail "$TEST_DIR/p.log"; fail "llmtrain exited $?"; }
commit=unknown
[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd)" ] && commit=$(git rev-parse HEAD)
hdf5=$(pkg-config --modversion hdf5-openmpi 2>/dev/null || pkg-config --modversion hdf5 2>/dev/null || echo "")
$PYTHON - "$TEST_DIR/p" "$commit" "$(hostname)" "$hdf5" <<'PY' || fail "provenance differs"
import json, re, sys, h5py
run, commit, host, hdf5 = sys.argv[1:5]
bad = []
def check(what, got, want):
    if got != want: bad.append("%s: %r, expected %r" % (what, got, want))
rj = json.load(open(run + "/run.json"))
if commit != "unknown": check("run.json commit (git rev-parse HEAD)", rj["commit"], commit)
check("dirty is a boolean (or null without git)", type(rj["dirty"]) in (bool,) or (rj["dirty"] is None and rj["commit"] == "unknown"), True)
check("hosts", rj["hosts"], [host]); check("rank_hosts", rj["rank_hosts"], [host, host])
check("world_size", rj["world_size"], 2); check("dp", rj["dp"], 2)
check("slurm_job_id", rj["slurm_job_id"], "4242"); check("slurm_step_id", rj["slurm_step_id"], "7")
check("slurm_restart_count", rj["slurm_restart_count"], "1")
check("loaded_modules", rj["loaded_modules"], "gcc/12.2:openmpi/4.1.4:hdf5/1.10")
if hdf5: check("hdf5 (pkg-config)", rj["hdf5"], hdf5)
check("mpi names the library", "MPI" in rj["mpi"], True)
check("build_date ISO 8601", bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", rj["build_date"])), True)
check("cuda", rj["cuda"], "not built")
for k in ("compiler", "cflags", "gemm", "hwloc", "papi", "run_id", "started", "llmtrain_version"):
    check(k + " present", bool(rj.get(k)), True)
first = json.loads(open(run + "/metrics.jsonl").readline())
check("metrics first record kind", first.pop("kind", None), "provenance")
check("metrics first record step", first.pop("step", None), 0)
check("metrics first record = run.json", first, rj)
def text(v):
    if isinstance(v, bool): return "true" if v else "false"
    if v is None: return ""
    if isinstance(v, list): return ",".join(v)
    return str(v)
for name in ("ckpt_step00000004.h5", "weights_step000004.h5"):
    f = h5py.File(run + "/" + name, "r")
    check(name + " /config = run.json config", f.attrs["config"].decode() if isinstance(f.attrs["config"], bytes) else f.attrs["config"], rj["config"])
    pv = f["provenance"].attrs
    want = {k: text(v) for k, v in rj.items() if k not in ("config", "rank_hosts")}
    got = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in pv.items()}
    check(name + " /provenance attributes", got, want)
print("run.json: commit %s dirty %s, hosts %s, Slurm job %s step %s restart %s, %s, HDF5 %s, %s" % (
      rj["commit"][:12], rj["dirty"], rj["hosts"], rj["slurm_job_id"], rj["slurm_step_id"],
      rj["slurm_restart_count"], rj["mpi"][:20], rj["hdf5"], rj["gemm"]))
print("metrics.jsonl first record and /provenance of the checkpoint and weights file: %d fields equal" % len(rj))
print("\n".join(bad)); sys.exit(1 if bad else 0)
PY

echo "== outside a git checkout"
tmp=$(mktemp -d)
cp Makefile Makefile.inc "$tmp"/
(cd "$tmp" && GIT_CEILING_DIRECTORIES=$tmp make -s build/buildinfo_gen.h >/dev/null 2>&1)
grep -q '^#define LLMT_GIT_COMMIT "unknown"$' "$tmp/build/buildinfo_gen.h" &&
    grep -q '^#define LLMT_GIT_DIRTY "unknown"$' "$tmp/build/buildinfo_gen.h" ||
    { cat "$tmp/build/buildinfo_gen.h" 2>&1; rm -rf "$tmp"; fail "outside git: commit/dirty not 'unknown'"; }
rm -rf "$tmp"
echo "outside git: commit and dirty compiled in as 'unknown'"
echo "PASS"
