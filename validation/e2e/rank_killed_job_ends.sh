#!/usr/bin/env bash
# A dead rank never hangs the job: SIGKILL one of 8 ranks (grid 2x2x2) in the middle of training
# and the whole job ends with a non-zero exit code within 60 s.
source "$(dirname "$0")/lib.bash"
cat >$TEST_DIR/kill.nml <<NML
&run name = 'kill', out_dir = '$TEST_DIR' /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&parallel dp = 2, tp = 2, pp = 2 /
&train max_steps = 100000, micro_batch = 2, global_batch = 8 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint timeout_s = 30 /
&log every = 1 /
NML
launch_until_step 8 $TEST_DIR/kill.nml kill 3
pid=$LAUNCH_PID
victim=$(pgrep -f '^\./llmtrain .*kill\.nml' | sed -n 6p)
[ -n "$victim" ] || fail "no rank process found"
t0=$(date +%s.%N)
kill -KILL $victim
if ! wait_gone $pid 60; then
    pkill -KILL -f 'llmtrain .*kill\.nml'
    fail "the job still runs 60 s after the rank was killed"
fi
wait $pid
rc=$?
t1=$(date +%s.%N)
elapsed=$(awk -v a=$t0 -v b=$t1 'BEGIN {printf "%.1f", b - a}')
echo "killed rank pid $victim at step >= 3: job ended with exit code $rc after $elapsed s"
[ $rc -ne 0 ] || fail "job exited 0 after a rank was killed"
sleep 1
if pgrep -f '^\./llmtrain .*kill\.nml' >/dev/null; then fail "rank processes left behind"; fi
