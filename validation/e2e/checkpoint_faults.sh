#!/usr/bin/env bash
# Faults around checkpoints (2 ranks, tp = 2, unless said otherwise):
#  1. SIGUSR1 mid-run -> checkpoint at the next step boundary and exit 75; resume = 'auto'
#     continues the same loss curve bit for bit; `keep` leaves only the newest files.
#  2. one flipped byte in the newest checkpoint -> refused by its checksum, the previous one used;
#     the same file given as resume = path -> refused with exit 2.
#  3. a truncated checkpoint -> refused, the previous one used.
#  4. SIGKILL of a rank during a save -> the previous checkpoint and `latest` intact and used.
#  (a full file system: checkpoint_disk_full.sh, which needs to mount a tmpfs)
source "$(dirname "$0")/lib.bash"
nml() { # name max_steps every resume [dir] [model]
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model ${6:-n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32} /
&parallel tp = 2 /
&train max_steps = $2, micro_batch = 4, global_batch = 8, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = $3, keep = 2, resume = '$4', dir = '${5:-}' /
&log every = 1 /
NML
}
run() { timeout 120 $MPIRUN -np 2 ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1; }
lines() { losses "$TEST_DIR/$1/metrics.jsonl" | tr '\n' ' '; }

echo "== 1. SIGUSR1 -> checkpoint, exit 75, resume continues the same curve"
nml ref 30 4 none
run ref || fail "reference run failed"
nml sig 30 4 auto
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/sig.nml" >"$TEST_DIR/sig1.log" 2>&1 &
pid=$!
for i in $(seq 600); do # wait for step 6, then signal both ranks
    grep -q '"step":6,' "$TEST_DIR/sig/metrics.jsonl" 2>/dev/null && break
    sleep 0.05
done
pkill -USR1 -f '^\./llmtrain .*sig\.nml'
wait $pid
rc=$?
[ $rc -eq 75 ] || { tail "$TEST_DIR/sig1.log"; fail "after SIGUSR1 the exit code is $rc, expected 75"; }
grep "received SIGUSR1" "$TEST_DIR/sig1.log" || fail "no message about the signal"
cp "$TEST_DIR/sig.nml" "$TEST_DIR/sig_resume.nml"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/sig.nml" >"$TEST_DIR/sig2.log" 2>&1 || fail "resumed run failed"
grep "^resume:" "$TEST_DIR/sig2.log"
[ "$(lines sig)" = "$(lines ref)" ] || { echo "ref: $(lines ref)"; echo "sig: $(lines sig)"; fail "interrupted + resumed losses differ from the uninterrupted run"; }
echo "interrupted and resumed: 30 losses bit-identical to the uninterrupted run"
n=$(ls "$TEST_DIR/sig"/ckpt_step*.h5 | wc -l)
[ "$n" -eq 2 ] || fail "keep = 2 but $n checkpoint files remain"

echo "== 2. a flipped byte is detected and the previous checkpoint used"
nml corrupt 12 4 none
run corrupt || fail "run failed"
newest=$TEST_DIR/corrupt/ckpt_step00000012.h5
$PYTHON - "$newest" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["model/h.1.mlp.fc.w"].id.get_offset() + 1001   # a byte inside the tensor data
with open(sys.argv[1], "r+b") as g:
    g.seek(off); b = g.read(1); g.seek(off); g.write(bytes([b[0] ^ 0x10]))
print("flipped one bit of the byte at offset", off)
PY
cp "$newest" "$TEST_DIR/corrupt_copy.h5" # the resumed run below rewrites step 12
sed -i "s/max_steps = 12/max_steps = 14/; s/resume = 'none'/resume = 'auto'/" "$TEST_DIR/corrupt.nml"
run corrupt || { tail "$TEST_DIR/corrupt.log"; fail "auto resume after corruption failed"; }
grep "refused .*fails its checksum" "$TEST_DIR/corrupt.log" || fail "corruption not reported"
grep -q "^resume: .*ckpt_step00000008.h5: step 8" "$TEST_DIR/corrupt.log" || fail "did not fall back to step 8"
echo "fell back to step 8"
nml explicit 14 4 "$TEST_DIR/corrupt_copy.h5"
run explicit
rc=$?
[ $rc -eq 2 ] || fail "a corrupt checkpoint given as resume = path: exit $rc, expected 2"
grep "fails its checksum" "$TEST_DIR/explicit.log" | head -1

echo "== 3. a truncated checkpoint is refused"
nml trunc 12 4 none
run trunc || fail "run failed"
f=$TEST_DIR/trunc/ckpt_step00000012.h5
truncate -s $(($(stat -c %s "$f") / 2)) "$f"
sed -i "s/max_steps = 12/max_steps = 14/; s/resume = 'none'/resume = 'auto'/" "$TEST_DIR/trunc.nml"
run trunc || fail "auto resume after truncation failed"
grep "refused .*truncated" "$TEST_DIR/trunc.log" || fail "truncation not reported"
grep -q "^resume: .*step 8" "$TEST_DIR/trunc.log" || fail "did not fall back to step 8"

echo "== 4. SIGKILL during a save leaves the previous checkpoint intact"
big="n_layer = 4, n_head = 4, d_model = 256, d_ff = 1024, vocab_size = 500, seq_len = 32"
nml killsave 6 2 none "" "$big"
$MPIRUN -np 2 ./llmtrain "$TEST_DIR/killsave.nml" >"$TEST_DIR/killsave.log" 2>&1 &
pid=$!
killed=0
for i in $(seq 4000); do # the step-4 save's temporary file appears: kill a rank right then
    if [ -f "$TEST_DIR/killsave/ckpt_step00000004.h5.tmp" ]; then
        pkill -KILL -f '^\./llmtrain .*killsave\.nml' && killed=1
        break
    fi
    sleep 0.005
done
wait $pid
[ $killed -eq 1 ] || fail "never caught the save in progress"
[ -f "$TEST_DIR/killsave/ckpt_step00000004.h5" ] && fail "the killed save was published"
grep -q "ckpt_step00000002.h5" "$TEST_DIR/killsave/latest" || fail "latest does not name step 2"
sed -i "s/resume = 'none'/resume = 'auto'/" "$TEST_DIR/killsave.nml"
run killsave || { tail "$TEST_DIR/killsave.log"; fail "resume after the killed save failed"; }
grep "^resume: .*step 2" "$TEST_DIR/killsave.log" || fail "did not resume from step 2"

