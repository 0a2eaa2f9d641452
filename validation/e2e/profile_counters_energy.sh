#!/usr/bin/env bash
# &log papi_events and the energy counters, on 2 ranks:
#  - an unknown event name: one message naming it and what this machine offers, exit 2 (all ranks);
#  - known events this machine cannot count (this VM exposes no PMU): one startup line, the run
#    goes on (exit 0);
#  - energy from a fake powercap tree ($LLMT_POWERCAP_ROOT) whose package counter a writer advances
#    by 0.25 J every 5 ms and wraps at 1 J: every step's energy_j >= 0 (a wrap undone, not
#    negative), their sum is the run's energy_steps_j (1e-6 J), emissions_g = energy_run_j / 3.6e6
#    x 400 gCO2/kWh (rel. 1e-6), and the run's energy is at most what the writer wrote (the node's
#    two ranks count it once);
#  - without the tree: one startup line 'energy: not available on this machine (...)'.
source "$(dirname "$0")/lib.bash"
nml() { # nml FILE LOG-GROUP
    cat >"$1" <<NML
&run name = 'pc', out_dir = '$TEST_DIR' /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 2 /
&train max_steps = 6, micro_batch = 2, global_batch = 8 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false., overwrite = .true. /
&log $2 /
NML
}
nml "$TEST_DIR/bad.nml" "papi_events = 'PAPI_TOT_INS,PAPI_NO_SUCH'"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/bad.nml" >"$TEST_DIR/bad.log" 2>&1
rc=$?
cat "$TEST_DIR/bad.log" | grep error
[ $rc -eq 2 ] || fail "unknown event: exit $rc, expected 2"
[ "$(grep -c "unknown event 'PAPI_NO_SUCH'; this machine offers: " "$TEST_DIR/bad.log")" -eq 1 ] || fail "not one message"

nml "$TEST_DIR/papi.nml" "papi_events = 'PAPI_TOT_INS,PAPI_TOT_CYC'"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/papi.nml" >"$TEST_DIR/papi.log" 2>&1 || { cat "$TEST_DIR/papi.log"; fail "papi run exited $?"; }
grep -E "^papi:|^energy:" "$TEST_DIR/papi.log"
if grep -q "^papi: counting" "$TEST_DIR/papi.log"; then
    grep -q '"papi_forward_PAPI_TOT_INS"' "$TEST_DIR/pc/metrics.jsonl" || fail "counting, but no per-phase counts in the step records"
    grep -q '"papi_totals_rank":1' "$TEST_DIR/pc/metrics.jsonl" || fail "no end-of-run counts of rank 1"
else
    [ "$(grep -c '^papi: PAPI_TOT_INS,PAPI_TOT_CYC not counted: hardware counters are not available on this machine (' "$TEST_DIR/papi.log")" -eq 1 ] ||
        fail "not one startup line saying the counters are unavailable"
fi
[ -d /sys/class/powercap ] || [ "$(grep -c '^energy: not available on this machine (' "$TEST_DIR/papi.log")" -eq 1 ] ||
    fail "not one 'energy: not available' line"

# the fake tree and its writer
root=$TEST_DIR/powercap
mkdir -p "$root/intel-rapl:0"
echo package-0 >"$root/intel-rapl:0/name"
echo 999999 >"$root/intel-rapl:0/max_energy_range_uj"
echo 0 >"$root/intel-rapl:0/energy_uj"
$PYTHON - "$root/intel-rapl:0" "$TEST_DIR/written_j" <<'PY' &
import os, signal, sys, time
d, out = sys.argv[1], sys.argv[2]
total = 0
def stop(*_):
    open(out, "w").write("%.6f\n" % (total * 1e-6)); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    total += 250000
    with open(d + "/energy_uj.tmp", "w") as f: f.write("%d\n" % (total % 1000000))
    os.rename(d + "/energy_uj.tmp", d + "/energy_uj")
    time.sleep(0.005)
PY
writer=$!
nml "$TEST_DIR/energy.nml" "carbon_intensity = 400"
LLMT_POWERCAP_ROOT=$root $MPIRUN -x LLMT_POWERCAP_ROOT -np 2 ./llmtrain "$TEST_DIR/energy.nml" >"$TEST_DIR/energy.log" 2>&1
rc=$?
kill -TERM $writer; wait $writer
[ $rc -eq 0 ] || { cat "$TEST_DIR/energy.log"; fail "energy run exited $rc"; }
grep -E "^energy|^emissions" "$TEST_DIR/energy.log"
[ "$(grep -c '^energy: RAPL package-0 per node' "$TEST_DIR/energy.log")" -eq 1 ] || fail "no single energy startup line"
$PYTHON - "$TEST_DIR/pc/metrics.jsonl" "$(cat "$TEST_DIR/written_j")" <<'PY' || fail "energy records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["energy_j"] for r in recs if "loss" in r and "superseded" not in r]  # this run's steps
run = [r for r in recs if "energy_run_j" in r][-1]
written = float(sys.argv[2])
print("per step J:", " ".join("%.3f" % j for j in steps), "| steps %.3f J, run %.3f J, writer wrote %.3f J, %.6f g"
      % (run["energy_steps_j"], run["energy_run_j"], written, run["emissions_g"]))
assert len(steps) == 6 and min(steps) >= 0, steps
assert abs(sum(steps) - run["energy_steps_j"]) <= 1e-5, (sum(steps), run["energy_steps_j"])
assert run["energy_steps_j"] <= run["energy_run_j"] + 1e-6 and run["energy_run_j"] > 0
assert run["energy_run_j"] <= written + 1e-6, (run["energy_run_j"], written)
want = run["energy_run_j"] / 3.6e6 * 400
assert abs(run["emissions_g"] - want) <= 1e-6 * want + 1e-12, (run["emissions_g"], want)
PY
