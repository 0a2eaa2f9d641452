#!/usr/bin/env bash
# MoE checkpoints are grid-independent: the tiny MoE model of lib_moe.bash trains on dp 4 x ep 2
# (each ep rank holds 2 of the 4 experts) and saves at step 3 (and 6); the step-3 checkpoint
# resumes on one process (ep 1), on dp 4 x ep 4 (1 expert per rank) and on tp 2 x pp 2 (no dp),
# and each resumed run's steps 4-6 equal the uninterrupted serial run's: loss (rel. 1e-6),
# gradient norm (rel. 1e-5), moe_aux_loss and moe_z_loss (rel. 1e-6), per-layer expert loads
# (exactly). h5py then reads the dp 4 x ep 2 checkpoint: the expert tensors are in their global
# shapes (fc.w [E, Fe, C] = [4, 64, 64], proj.w [E, C, Fe], fc.b [E, Fe], proj.b [E, C], the AdamW
# moments likewise), no expert's slice is zero or a copy of another's (a writer that wrote one
# ep rank's experts twice, or skipped an ep rank, would leave that), and every tensor equals the
# serial run's step-3 checkpoint within 1e-5 (the AdamW moments within 1e-5 of each tensor's
# largest |value|).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash"
t0=$(date +%s.%N)
moe_nml
run_moe serial 1 checkpoint.every=3
run_moe save 4 parallel.dp=4 parallel.ep=2 checkpoint.every=3
grep "^checkpoint:" "$TEST_DIR/save.log"
ck=$TEST_DIR/save/ckpt_step00000003.h5
[ -f "$ck" ] && [ -f "$TEST_DIR/serial/ckpt_step00000003.h5" ] || fail "no step-3 checkpoint"
moe_header
moe_compare serial save
while read -r name np keys; do
    # shellcheck disable=SC2086  # keys: blank-separated overrides
    run_moe "$name" "$np" $keys checkpoint.resume="$ck"
    grep -q "^resume: .*step 3" "$TEST_DIR/$name.log" || { grep "^resume" "$TEST_DIR/$name.log"; fail "$name did not resume from step 3"; }
    [ "$(step_records "$TEST_DIR/$name/metrics.jsonl" 1 | awk -F'[:,]' '{print $2}' | tr '\n' ' ')" = "4 5 6 " ] ||
        fail "$name: its step records are not steps 4, 5, 6"
    moe_compare serial "$name" 4
done <<'GRIDS'
resumed_serial_ep1    1
resumed_dp4_ep4       4 parallel.dp=4 parallel.ep=4
resumed_tp2_pp2       4 parallel.tp=2 parallel.pp=2
GRIDS
$PYTHON - "$ck" "$TEST_DIR/serial/ckpt_step00000003.h5" <<'PY' || fail "h5py check of the expert tensors failed"
import sys, h5py, numpy as np
ck, ref = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert ck.attrs["step"] == 3 and ck.attrs["grid_dp"] == 4, (ck.attrs["step"], ck.attrs["grid_dp"])
E, C, Fe = 4, 64, 64
shapes = {"fc.w": (E, Fe, C), "proj.w": (E, C, Fe), "fc.b": (E, Fe), "proj.b": (E, C)}
worst = {"model": 0.0, "m": 0.0, "v": 0.0}
n_expert = 0
for name in ref["model"]:
    for group, path in (("model", "model/"), ("m", "optimizer/adamw/m/"), ("v", "optimizer/adamw/v/")):
        a, b = ck[path + name][...], ref[path + name][...]
        assert a.shape == b.shape, (path + name, a.shape, b.shape)
        # weights: absolute 1e-5; moments: 1e-5 of the tensor's largest |value| (they are tiny)
        tol = 1e-5 * (1 if group == "model" else float(np.abs(b).max()))
        diff = float(np.abs(a - b).max())
        assert diff <= tol, (path + name, "max |diff|", diff, "tolerance", tol)
        worst[group] = max(worst[group], diff / (1 if group == "model" else float(np.abs(b).max())))
        if ".moe.experts." not in name:
            continue
        assert a.shape == shapes[name.split(".moe.experts.")[1]], (path + name, a.shape)
        for e in range(E):
            assert np.abs(a[e]).max() > 0, (path + name, "expert %d is all zeros" % e)
            for f in range(e):  # ep rank 0 wrote experts 0-1, ep rank 1 experts 2-3
                assert not np.array_equal(a[e], a[f]), (path + name, "experts %d and %d are equal" % (f, e))
        n_expert += 1
assert n_expert == 3 * 2 * 4, n_expert
print("h5py: %d expert tensors (2 layers x fc.w, fc.b, proj.w, proj.b x model, m, v) in global shapes, "
      "4 distinct non-zero experts each; vs the serial step-3 checkpoint: max |diff| model %.1e, "
      "m %.1e and v %.1e (relative to the tensor's max |value|)"
      % (n_expert, worst["model"], worst["m"], worst["v"]))
PY
echo "PASS ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s)"
