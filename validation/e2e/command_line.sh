#!/usr/bin/env bash
# The command line: `llmtrain input.nml group.key=value ...` trains with the overrides applied
# (1 rank, and 2 ranks where parallel.dp=2 comes from the command line), shows them in the
# banner and the effective configuration and stores them in the weights files; a bad override,
# an unknown option and a missing file end with exit 2 and one message on stderr; --help,
# --version and llmprep --version exit 0 with their text; --plan takes overrides; rank 0's
# overrides are the ones every rank applies (test_overrides on 2 ranks).
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
version=$(sed -n 's/^#define LLMT_VERSION "\(.*\)"/\1/p' src/core/version.h)
[ -n "$version" ] || fail "no LLMT_VERSION in src/core/version.h"

# the config attribute of a weights file (the effective namelist it was written with)
config_attr() {
    $PYTHON -c 'import h5py, sys; a = h5py.File(sys.argv[1], "r").attrs["config"]
print(a.decode() if isinstance(a, bytes) else a, end="")' "$1"
}

# trains NAME on NP ranks with the overrides after it; checks the output, the steps and the file
train_with_overrides() {
    local name=$1 np=$2; shift 2
    timeout 120 $MPIRUN -np "$np" ./llmtrain inputs/tiny.nml "$@" >"$g/$name.out" 2>"$g/$name.err" ||
        { cat "$g/$name.err"; fail "$name: exit code $?"; }
    grep -qxF "overrides: $*" "$g/$name.out" || { head -5 "$g/$name.out"; fail "$name: no 'overrides: $*' line"; }
    grep -qxF "! inputs/tiny.nml with the command-line overrides: $*" "$g/$name.out" ||
        fail "$name: the effective configuration does not name the overrides"
    grep -qxE '  max_steps += 3' "$g/$name.out" || fail "$name: effective configuration lacks max_steps = 3"
    local steps; steps=$(grep -c '"loss"' "$g/$name/metrics.jsonl")
    [ "$steps" -eq 3 ] || fail "$name: $steps training steps in metrics.jsonl, expected 3 (train.max_steps=3; the file says 50)"
    [ -f "$g/$name/weights_step000003.h5" ] || fail "$name: no final weights_step000003.h5"
    config_attr "$g/$name/weights_step000003.h5" >"$g/$name.config" || fail "$name: cannot read the config attribute"
    grep -qxE '  max_steps += 3' "$g/$name.config" || fail "$name: the weights file's configuration lacks max_steps = 3"
    grep -qF "with the command-line overrides: $*" "$g/$name.config" || fail "$name: the weights file does not name the overrides"
    echo "ok  $name on $np rank(s): 3 steps, banner, effective configuration and weights file show the overrides"
}

train_with_overrides serial 1 train.max_steps=3 run.name=serial "run.out_dir=$g" "data.train_files=data/tiny/train_*.bin"
train_with_overrides dp2 2 train.max_steps=3 parallel.dp=2 run.name=dp2 "run.out_dir=$g"
grep -qxE '  dp += 2' "$g/dp2.config" || fail "dp2: the weights file's configuration lacks dp = 2"
grep -q "2 MPI ranks" "$g/dp2.out" || fail "dp2: banner does not say 2 MPI ranks"
echo "ok  dp2: parallel.dp=2 from the command line ran on the 2-rank grid"

# exit 2 on every rank, exactly one error line on stderr, containing WANT, and no crash banner
expect_error() { # name want np args...
    local name=$1 want=$2 np=$3 rc; shift 3
    timeout 60 $MPIRUN -np "$np" ./llmtrain "$@" >"$g/$name.out" 2>"$g/$name.err"
    rc=$?
    [ $rc -eq 2 ] || { cat "$g/$name.err"; fail "$name: exit code $rc, expected 2"; }
    local n; n=$(grep -c "llmtrain: error" "$g/$name.err")
    [ "$n" -eq 1 ] || { cat "$g/$name.err"; fail "$name: $n error lines, expected exactly 1"; }
    grep -qF -- "$want" "$g/$name.err" || { cat "$g/$name.err"; fail "$name: message lacks: $want"; }
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked" "$g/$name.err"; then fail "$name: crash/abort banner"; fi
    echo "ok  $name: $(grep 'llmtrain: error' "$g/$name.err" | cut -c1-150)"
}
expect_error unknown_key "command line argument 3 'train.max_step=20': &train unknown key 'max_step'" 2 \
    inputs/tiny.nml "run.out_dir=$g" train.max_step=20
grep -qF "did you mean 'max_steps'?" "$g/unknown_key.err" || fail "unknown_key: no suggestion"
expect_error out_of_range "command line argument 2 'train.max_steps=-3': &train max_steps: must be >= 0, got -3" 2 \
    inputs/tiny.nml train.max_steps=-3
expect_error bad_type "command line argument 2 'parallel.dp=two': unquoted word 'two'" 2 inputs/tiny.nml parallel.dp=two
expect_error cross_key "command line argument 3 'model.top_k=5': &model top_k: top_k = 5 (command line argument 3) must be <= n_experts = 4 (command line argument 2)" 2 \
    inputs/tiny.nml model.n_experts=4 model.top_k=5
expect_error not_group_key "command line argument 2 'max_steps=3': expected GROUP.KEY=VALUE" 2 inputs/tiny.nml max_steps=3
expect_error grid_from_override "dp*tp*pp" 2 inputs/tiny.nml parallel.dp=4 train.global_batch=16
expect_error unknown_option "unknown option '--bogus' (command line argument 1)" 2 --bogus inputs/tiny.nml
expect_error unknown_option_after_file "unknown option '--bogus' (command line argument 2)" 1 inputs/tiny.nml --bogus
expect_error no_file "no namelist file given" 1
expect_error missing_file "$g/no_such.nml: cannot read the namelist file" 1 "$g/no_such.nml" train.max_steps=3

# --help and --version: exit 0, printed once on 2 ranks
timeout 60 $MPIRUN -np 2 ./llmtrain --help >"$g/help.out" 2>"$g/help.err" || fail "--help: exit code $?"
for want in "usage: srun ./llmtrain input.nml [group.key=value ...]" "--plan input.nml [group.key=value ...]" \
            "--version" "'train' (default), 'eval'" "'generate'" "train.max_steps=20" "exit codes: 0 done" \
            "2 bad input" "3 internal error" "4 the watchdog" "5 a checkpoint" "75 stopped by SIGUSR1/SIGTERM"; do
    grep -qF -- "$want" "$g/help.out" || { cat "$g/help.out"; fail "--help lacks: $want"; }
done
[ "$(grep -c '^usage:' "$g/help.out")" -eq 1 ] || fail "--help printed more than once on 2 ranks"
./llmtrain -h >"$g/h.out" && cmp -s "$g/h.out" <(./llmtrain --help) || fail "-h differs from --help"
echo "ok  --help / -h: usage, override syntax, modes, exit codes 0 2 3 4 5 75"

timeout 60 $MPIRUN -np 2 ./llmtrain --version >"$g/version.out" 2>"$g/version.err" || fail "--version: exit code $?"
case "$(head -1 "$g/version.out")" in "llmtrain $version, commit "*", built "*) ;;
    *) cat "$g/version.out"; fail "--version: first line is not 'llmtrain $version, commit ..., built ...'" ;; esac
for want in "compiler: " "flags: " "libraries: .*MPI.*HDF5 .*hwloc .*PAPI "; do
    grep -q "^$want" "$g/version.out" || { cat "$g/version.out"; fail "--version lacks a '$want' line"; }
done
[ "$(wc -l <"$g/version.out")" -eq 4 ] || { cat "$g/version.out"; fail "--version: expected 4 lines once, got $(wc -l <"$g/version.out")"; }
echo "ok  --version: $(tr '\n' '|' <"$g/version.out")"

# --keys: exit 0, one JSON object once on 2 ranks; each group's key names (in order) are those the
# unknown-key message lists as valid (another path through the same table)
timeout 60 $MPIRUN -np 2 ./llmtrain --keys >"$g/keys.out" 2>"$g/keys.err" || fail "--keys: exit code $?"
printf '&stage zzz = 1 /\n' >"$g/stage_zzz.nml"
$PYTHON - "$g" <<'PY' || fail "--keys does not match the valid keys of the messages"
import json, re, subprocess, sys
g = sys.argv[1]
keys = json.load(open(g + "/keys.out"))["keys"]  # one object: a second copy would not parse
groups = {}
for k in keys:
    groups.setdefault(k["group"], []).append(k["name"])
    assert k["type"] in ("int", "int64", "real", "string", "bool", "int_array"), k
for grp, names in groups.items():
    args = ["./llmtrain", "--plan", "inputs/tiny.nml", grp + ".zzz=1"] if grp != "stage" else \
           ["./llmtrain", "--plan", g + "/stage_zzz.nml"]
    err = subprocess.run(args, capture_output=True, text=True).stderr
    valid = re.search(r"valid keys: ([^)]*)\)", err).group(1).split(", ")
    assert valid == names, (grp, valid, names)
n_layer = [k for k in keys if (k["group"], k["name"]) == ("model", "n_layer")][0]
assert (n_layer["default"], n_layer["min"], n_layer["max"]) == (12, 1, 1024), n_layer
print("ok  --keys: %d keys in %d groups, each group's names = the valid keys of its messages" % (len(keys), len(groups)))
PY

./llmprep --version >"$g/llmprep_version.out" 2>&1 || fail "llmprep --version: exit code $?"
[ "$(head -1 "$g/llmprep_version.out")" = "llmprep (llmtrain) $version" ] || { cat "$g/llmprep_version.out"; fail "llmprep --version: first line"; }
grep -q "^MPI: " "$g/llmprep_version.out" || fail "llmprep --version lacks the MPI line"
echo "ok  llmprep --version: $(head -1 "$g/llmprep_version.out")"

# --plan takes overrides (one process)
./llmtrain --plan inputs/tiny.nml parallel.dp=2 train.micro_batch=2 >"$g/plan.out" 2>&1 || { cat "$g/plan.out"; fail "--plan: exit code $?"; }
grep -qxF "overrides: parallel.dp=2 train.micro_batch=2" "$g/plan.out" || fail "--plan: no overrides line"
grep -q "on dp 2 x tp 1 x pp 1" "$g/plan.out" && grep -q "micro_batch 2 x accumulation 2" "$g/plan.out" ||
    { head -3 "$g/plan.out"; fail "--plan: the plan is not for dp 2, micro_batch 2"; }
echo "ok  --plan with overrides: $(grep '^plan:' "$g/plan.out")"

# rank 0's overrides on every rank (the others are given different ones)
[ -x build/tests/test_overrides ] || fail "build/tests/test_overrides is not built (make tests)"
timeout 60 $MPIRUN -np 2 build/tests/test_overrides >"$g/unit2.log" 2>&1 || { tail -20 "$g/unit2.log"; fail "test_overrides on 2 ranks"; }
echo "ok  test_overrides on 2 ranks: rank 0's overrides applied on both"
echo "PASS"
