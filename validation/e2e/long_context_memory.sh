#!/usr/bin/env bash
# Long contexts train in memory linear in seq_len: attention keeps no T x T matrix (only out and
# the log-sum-exp per row, and a few tiles of scratch per thread). A tiny model (n_layer 2,
# d_model 64, 2 heads, vocabulary 500) trains 2 steps at seq_len 512, 1024 and 2048; from the
# end-of-run table, the measured peak of activations + workspace (the two categories attention
# used) must grow linearly: m(2048) - m(1024) = 2.0 (1.8 .. 2.2) x (m(1024) - m(512)), where
# T x T buffers make it 4 (the old kernel's was 3.5), and m(2048) / m(1024) <= 2.2 (old: 3.3).
# The planner's prediction for seq_len 8192 (llmtrain --plan, nothing allocated) lies on the
# line through the measurements (within 5%), so the planner counts the same physics.
source "$(dirname "$0")/lib.bash"
ctx_nml() { # seq_len
    cat >"$TEST_DIR/t$1.nml" <<NML
&run name = 't$1', out_dir = '$TEST_DIR', seed = 3 /
&model n_layer = 2, n_head = 2, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = $1 /
&train max_steps = 2, micro_batch = 1, global_batch = 1, lr = 1e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&log every = 1, peak_flops = 1e10 /
NML
}
for T in 512 1024 2048; do
    ctx_nml $T
    timeout 120 $MPIRUN -np 1 ./llmtrain "$TEST_DIR/t$T.nml" >"$TEST_DIR/t$T.log" 2>&1 ||
        { tail -20 "$TEST_DIR/t$T.log"; fail "seq_len $T exited non-zero"; }
done
ctx_nml 8192
./llmtrain --plan "$TEST_DIR/t8192.nml" >"$TEST_DIR/t8192.plan" 2>&1 ||
    { cat "$TEST_DIR/t8192.plan"; fail "llmtrain --plan at seq_len 8192 exited non-zero"; }

$PYTHON - "$TEST_DIR" <<'PY' || fail "attention memory does not grow linearly with seq_len (above)"
import re, sys
d = sys.argv[1]
cats = ["parameters", "gradients", "optimizer", "master", "activations", "comm", "workspace"]
def measured(T):  # MiB of activations + workspace, measured peak, from the end-of-run table
    rows = re.findall(r"^  0 \(0,0,0\)\s+(.*)$", open(f"{d}/t{T}.log").read(), re.M)
    if not rows: sys.exit(f"seq_len {T}: no memory table")
    pairs = dict(zip(cats, (tuple(map(float, p.split("/"))) for p in rows[0].split()[:7])))
    return pairs["activations"][0] + pairs["workspace"][0]
m = {T: measured(T) for T in (512, 1024, 2048)}
plan = open(f"{d}/t8192.plan").read()
p = re.search(r"the fullest rank[^:]*:.* activations ([0-9.]+),.* workspace ([0-9.]+);", plan)
if not p: sys.exit("no plan for seq_len 8192:\n" + plan)
planned = float(p.group(1)) + float(p.group(2))
slope = (m[2048] - m[1024]) / (m[1024] - m[512])
ratio = m[2048] / m[1024]
line = m[2048] + (m[2048] - m[1024]) * (8192 - 2048) / 1024
print("activations + workspace, measured peak MiB: " +
      ", ".join(f"seq_len {T}: {v:.1f}" for T, v in m.items()))
print(f"increments 1024->2048 / 512->1024 = {slope:.2f} (linear 2, T x T 4; want 1.8..2.2); "
      f"2048/1024 = {ratio:.2f} (want <= 2.2)")
print(f"seq_len 8192: planned {planned:.1f} MiB, the measurements' line {line:.1f} MiB "
      f"(within 5%: {abs(planned - line) <= 0.05 * line})")
ok = 1.8 <= slope <= 2.2 and ratio <= 2.2 and abs(planned - line) <= 0.05 * line
sys.exit(0 if ok else 1)
PY
echo "long_context_memory: ok"
