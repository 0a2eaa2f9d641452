#!/usr/bin/env bash
# The memory planner with a backend that has memory of its own (a GPU; here the simulated device,
# LLMT_DEVSIM=1, whose arena of LLMT_DEVSIM_MB is its capacity): the categories are the device's,
# the host's buffers are planned beside them, and the limit is the device's.
#   B (2,1,2) bf16, ZeRO 2, recompute selective, 1F1B, checkpoints every 3 steps
#   O (1,1,1) fp32, &train offload = 'optimizer' (moments and master in host memory)
# On every rank and in every category the prediction is within 10% of the device's measured peak
# (0.1 MiB under 1 MiB; the end-of-run table "in device memory"); the host line's measured peak
# holds what was planned there (at least 90% of it) and at most 8 MiB more (the small untracked
# setup buffers and the simulated device's staging copies, which a GPU's NCCL does not make).
# O's device table has no optimizer or master state; its host plan has them. A device too small
# for the plan is refused before the model exists (exit 2, one message naming the device's memory
# and memory_limit_gb), and micro_batch = 0 picks the largest micro-batch the device holds.
source "$(dirname "$0")/lib.bash"
export LLMT_DEVSIM=1
nml() { # name dp pp zero precision recompute mb [extra &train] [extra &checkpoint]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 4, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 64 /
&parallel dp = $2, tp = 1, pp = $3, zero_stage = $4, recompute = '$6', schedule = '1f1b' /
&train max_steps = 6, micro_batch = $7, global_batch = 16, lr = 1e-3, precision = '$5' ${8:-} /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint ${9:-} /
&log every = 3 /
NML
}
run() { # name ranks
    timeout 300 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$1.log"; fail "$1 exited non-zero"; }
    grep -q '^compute: cpu-devsim backend' "$TEST_DIR/$1.log" || fail "$1: the simulated device was not used"
}
nml B 2 2 2 bf16 selective 2 "" "every = 3" && run B 4
nml O 1 1 0 fp32 none 4 ", offload = 'optimizer'" && run O 1
$PYTHON - "$TEST_DIR" <<'PY' || fail "the device plan is off (above)"
import re, sys
d = sys.argv[1]
cats = ["parameters", "gradients", "optimizer", "master", "activations", "comm", "workspace"]
bad = 0
for c in "BO":
    log = open(f"{d}/{c}.log").read()
    if "tracked buffers by category in device memory" not in log:
        print(f"{c}: the table does not say it is the device's memory"); bad = 1
    rows = re.findall(r"^  (\d+) \((\d+),(\d+),(\d+)\)\s+(.*)$", log, re.M)
    if not rows: print(f"{c}: no memory table"); bad = 1; continue
    for r, dp, tp, pp, rest in rows:
        pairs = [tuple(map(float, p.split("/"))) for p in rest.split()[:8]]
        for name, (meas, plan) in zip(cats + ["total"], pairs):
            err = abs(plan - meas) / meas if meas >= 1 else abs(plan - meas)
            if not (err <= 0.10 if meas >= 1 else err <= 0.1):
                print(f"{c} rank {r} {name}: device measured {meas} MiB, planned {plan} MiB"); bad = 1
        if c == "O" and (pairs[2] != (0.0, 0.0) or pairs[3] != (0.0, 0.0)):
            print(f"O: optimizer {pairs[2]}, master {pairs[3]} in device memory; offloaded: none"); bad = 1
    m = re.search(r"^host memory beside the device's.*: ([0-9.]+)/([0-9.]+)$", log, re.M)
    if not m: print(f"{c}: no host line"); bad = 1; continue
    meas, plan = float(m.group(1)), float(m.group(2))
    if not (meas >= 0.9 * plan and meas - plan <= 8):
        print(f"{c}: host measured {meas} MiB, planned {plan} MiB"); bad = 1
    print(f"{c}: {len(rows)} ranks x 8 device columns within 10%; host {meas}/{plan} MiB")
o = open(f"{d}/O.log").read()
p = re.search(r"^memory plan, host memory beside the device's \(rank 0\): ([0-9.]+) MiB", o, re.M)
# O's host plan: moments, master and the two staging buffers (5 x the parameters) + batches + copies
n = 4 * (2 * 64 + 3 * 64 * 64 + 3 * 64 + 64 * 64 + 64 + 2 * 64 + 256 * 64 + 256 + 64 * 256 + 64) \
    + 512 * 64 + 64 * 64 + 2 * 64
want = (5 * n * 4 + n * 4 + 2 * 16 * 64 * 4) / 2**20
if not p or abs(float(p.group(1)) - want) > 0.11:
    print(f"O: host plan {p and p.group(1)} MiB, expected {want:.2f} MiB (5 x parameters + a copy + batches)"); bad = 1
sys.exit(bad)
PY

# A device smaller than the plan: refused before the model, one message, every rank exit 2.
LLMT_DEVSIM_MB=8 timeout 120 $MPIRUN -np 4 ./llmtrain "$TEST_DIR/B.nml" run.name="'S'" >"$TEST_DIR/S.log" 2>&1; rc=$?
[ $rc = 2 ] || { tail "$TEST_DIR/S.log"; fail "a plan over the device's capacity exited $rc, not 2"; }
[ "$(grep -c "error.*memory_limit_gb.*the device's memory" "$TEST_DIR/S.log")" = 1 ] ||
    { cat "$TEST_DIR/S.log"; fail "no single message naming the device's memory"; }
! grep -qE "^model:|^step" "$TEST_DIR/S.log" || fail "the run over the device's capacity got to its model"
grep error "$TEST_DIR/S.log"

# micro_batch = 0 on the device: the capacity halfway between the device plans of micro_batch 4
# and 8 (no MFU measurement buffers: &log peak_flops) must choose 4.
total_of() { sed -n "s/^memory plan (rank 0, planner):.*; total \([0-9.]*\) MiB.*/\1/p" "$1"; }
for mb in 4 8; do
    nml M$mb 1 1 0 fp32 none $mb && sed -i "s/^&log /\&log peak_flops = 1e10, /; s/max_steps = 6/max_steps = 1/" "$TEST_DIR/M$mb.nml"
    run M$mb 1
done
a=$(total_of "$TEST_DIR/M4.log") b=$(total_of "$TEST_DIR/M8.log")
mib=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%d", (a + b) / 2}')
awk -v a="$a" -v b="$b" -v m="$mib" 'BEGIN {exit !(a < m && m < b)}' || fail "no whole MiB between the plans $a and $b"
nml M0 1 1 0 fp32 none 0 && sed -i "s/^&log /\&log peak_flops = 1e10, /; s/max_steps = 6/max_steps = 1/" "$TEST_DIR/M0.nml"
LLMT_DEVSIM_MB=$mib run M0 1
grep -q "the planner chose micro_batch 4" "$TEST_DIR/M0.log" ||
    { grep "batch\|memory plan" "$TEST_DIR/M0.log"; fail "micro_batch = 0 on a $mib MiB device (plans $a / $b MiB) did not choose 4"; }
echo "device plans: micro_batch 4 $a MiB, 8 $b MiB; a $mib MiB device: the planner chose 4"
