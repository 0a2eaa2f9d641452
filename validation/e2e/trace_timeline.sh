#!/usr/bin/env bash
# &log profile on a 2x1x2 grid (dp = 2, pp = 2, 4 ranks, 1F1B, 4 micro-batches, tiny model):
# trace.json of steps 2..4 is valid Chrome trace-event JSON with one named process per rank, the
# expected events per rank and step, aligned clocks, and stage 0's bubble in the trace agrees with
# the step records of metrics.jsonl (tolerances in check_trace.py); the part files are gone.
source "$(dirname "$0")/lib.bash"
cat >"$TEST_DIR/t.nml" <<NML
&run name = 'tl', out_dir = '$TEST_DIR' /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 2, pp = 2, schedule = '1f1b' /
&train max_steps = 4, micro_batch = 2, global_batch = 16, lr = 3e-3 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 3, save_weights = .false. /
&log profile = .true., profile_steps = '2:4' /
NML
$MPIRUN -np 4 ./llmtrain "$TEST_DIR/t.nml" >"$TEST_DIR/out.log" 2>&1 || { cat "$TEST_DIR/out.log"; fail "llmtrain exited $?"; }
grep -E "^profile:|^energy:" "$TEST_DIR/out.log"
[ "$(grep -c '^profile: timeline of steps 2..4' "$TEST_DIR/out.log")" -eq 1 ] || fail "no single startup line for the timeline"
ls "$TEST_DIR"/tl/trace.rank*.part >/dev/null 2>&1 && fail "part files left in the run directory"
$PYTHON validation/e2e/check_trace.py "$TEST_DIR/tl/trace.json" "$TEST_DIR/tl/metrics.jsonl" 2 2 4 2 4 ||
    fail "trace.json check failed"
grep -q '"name":"checkpoint write"' "$TEST_DIR/tl/trace.json" || fail "no checkpoint write event (every = 3, step 3 is profiled)"
