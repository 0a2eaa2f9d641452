#!/usr/bin/env bash
# The CPU backend's bf16 and fp16 stores are exactly PyTorch's: 2 million float32 values (random
# magnitudes over the whole range, ties, values next to the overflow thresholds, subnormals,
# +-0, +-Inf, NaN) rounded by build/ref/round_dump (the ops table's quantize, as the model calls
# it) and by torch's .to(torch.bfloat16 / torch.float16).float() must agree bit for bit (NaN
# compared as NaN). bf16: round to nearest even in fp32's range; fp16: IEEE binary16, overflow to
# Inf, subnormals kept.
source "$(dirname "$0")/lib.bash"
[ -x build/ref/round_dump ] || fail "build/ref/round_dump is missing (make tests builds it)"
$PYTHON - "$TEST_DIR" <<'PY' || fail "rounding differs from PyTorch"
import subprocess, sys, numpy as np, torch
d = sys.argv[1]
rng = np.random.default_rng(7)
bits = rng.integers(0, 2**32, size=1_500_000, dtype=np.uint64).astype(np.uint32)   # every pattern
mags = (rng.standard_normal(400_000) * 10.0 ** rng.uniform(-12, 12, 400_000)).astype(np.float32)
one = np.float32(1.0)
ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 65504, 65519.99, 65520,
                 -65520, 3.3895314e38, 3.4028235e38, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08,
                 1e-45, 0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32)
x = np.concatenate([bits.view(np.float32), mags, ties]).astype(np.float32)
ok = True
for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
    out = subprocess.run(["build/ref/round_dump", name], input=x.tobytes(), capture_output=True, check=True).stdout
    ours = np.frombuffer(out, dtype=np.float32)
    ref = torch.from_numpy(x.copy()).to(dt).float().numpy()
    same = (ours.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(ours) & np.isnan(ref))
    bad = np.flatnonzero(~same)
    print("%s: %d values, %d differ from PyTorch" % (name, x.size, bad.size))
    for i in bad[:5]:
        print("   x = %r (0x%08x): ours %r, torch %r" % (x[i], x.view(np.uint32)[i], ours[i], ref[i]))
    ok &= bad.size == 0
sys.exit(0 if ok else 1)
PY
