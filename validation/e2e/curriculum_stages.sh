#!/usr/bin/env bash
# Multi-stage training (&stage groups) and data mixtures, on the tiny model (&model seq_len 32):
#   stage 1: steps 1-4,   seq_len 16, global_batch 16, train_*.bin
#   stage 2: steps 5-44,  seq_len 32, global_batch 8, mixture train_000:0.7, train_001:0.3, own lr
#   stage 3: steps 45-48, seq_len 24, global_batch 8, train_*.bin
# Checks: (1) the step records show seq_len / global_batch / tokens per step changing exactly at
# the configured boundaries, and the stage lines are printed; (2) resuming from the checkpoint of
# step 4 (at a boundary) and of step 8 (inside the mixture stage) continues bit-identically:
# losses and gradient norms of every later step equal (string-equal) to the uninterrupted run's;
# (3) the mixture's per-source positions in the checkpoint of step 44 (320 samples drawn in
# stage 2) are within 4 binomial sigma of 0.7 / 0.3 and sum to 320; (4) dp = 2 gives the losses
# and gradient norms of dp = 1 within 1e-5 relative (as dp2_matches_serial) and the same
# per-source positions (the draw is grid-invariant); (5) bad stage input: one message naming the
# key at file:line, exit 2.
source "$(dirname "$0")/lib.bash"
stages() {
    cat <<'NML'
&stage
  until_step = 4, seq_len = 16, global_batch = 16
/
&stage
  until_step = 44
  mixture = 'data/tiny/train_000.bin:0.7, data/tiny/train_001.bin:0.3'
  lr = 1e-3, lr_schedule = 'constant'
/
&stage
  seq_len = 24
/
NML
}
run_one() { # name dp resume
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=48 dp=$2 val_every=0 val_files=
    sed -i "s#^&log#\&checkpoint every = 4, keep = 20, resume = '$3' /\n\&log#" $TEST_DIR/$1.nml
    stages >>$TEST_DIR/$1.nml
    $MPIRUN -np $2 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "$1 failed"; }
}
field() { grep '"loss"' "$2" | grep -v superseded | sed "s/.*\"$1\":\([^,}]*\).*/\1/"; }
attr() { $PYTHON -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs[sys.argv[2]]))" "$1" "$2"; }

run_one full 1 none
m=$TEST_DIR/full/metrics.jsonl
# (1) boundaries
got=$(paste -d: <(field step $m) <(field seq_len $m) <(field global_batch $m) <(field stage $m) |
      awk -F: '$1==1||$1==4||$1==5||$1==44||$1==45||$1==48' | tr '\n' ' ')
want="1:16:16:1 4:16:16:1 5:32:8:2 44:32:8:2 45:24:8:3 48:24:8:3 "
[ "$got" = "$want" ] || fail "stage boundaries: got '$got', want '$want'"
changes=$(paste -d: <(field seq_len $m) <(field global_batch $m) | uniq -c | awk '{print $1}' | tr '\n' ' ')
[ "$changes" = "4 40 4 " ] || fail "steps per stage: $changes, want 4 40 4"
tok=$(paste -d' ' <(field step $m) <(field tokens $m) | awk '$1==4||$1==5||$1==45' | awk '{print $2}' | tr '\n' ' ')
[ "$tok" = "1024 1280 11456 " ] || fail "tokens seen at steps 4, 5, 45: $tok, want 1024 1280 11456"
grep -q "^stage 2/3 begins at step 5: seq_len 32, global_batch 8" $TEST_DIR/full.log || fail "no stage-2 line"
grep -q "^stage 3/3 begins at step 45: seq_len 24" $TEST_DIR/full.log || fail "no stage-3 line"
grep -q "^  stage 2: steps 5-44 | seq_len 32" $TEST_DIR/full.log || fail "no stage plan at startup"
lr5=$(paste -d' ' <(field step $m) <(field lr $m) | awk '$1==5||$1==44{print $2}' | tr '\n' ' ')
[ "$lr5" = "0.001 0.001 " ] || fail "stage 2's constant lr 1e-3: got $lr5"
echo "boundaries: steps per stage $changes; tokens at steps 4/5/45: $tok; stage 2 lr $lr5"

# (2) resume across and inside stages: bit-identical
for s in 4 8; do
    ck=$TEST_DIR/full/ckpt_step$(printf %08d $s).h5
    [ -f $ck ] || fail "no checkpoint of step $s"
    run_one res$s 1 $ck
    grep -q "^resume: .*step $s" $TEST_DIR/res$s.log || fail "res$s did not resume from step $s"
    for f in loss grad_norm seq_len; do
        a=$(paste -d' ' <(field step $m) <(field $f $m) | awk -v s=$s '$1>s' | md5sum)
        b=$(paste -d' ' <(field step $TEST_DIR/res$s/metrics.jsonl) <(field $f $TEST_DIR/res$s/metrics.jsonl) | md5sum)
        [ "$a" = "$b" ] || { diff <(paste -d' ' <(field step $m) <(field $f $m) | awk -v s=$s '$1>s') \
            <(paste -d' ' <(field step $TEST_DIR/res$s/metrics.jsonl) <(field $f $TEST_DIR/res$s/metrics.jsonl)) | head; \
            fail "resume from step $s: $f differs"; }
    done
    echo "resume from step $s: losses, gradient norms, seq_len of steps $((s + 1))-48 identical"
done

# (3) mixture proportions: 40 steps x 8 samples drawn in stage 2, counted by the cursor
ck44=$TEST_DIR/full/ckpt_step00000044.h5
[ "$(attr $ck44 data_sources)" = 3 ] || fail "data_sources $(attr $ck44 data_sources), want 3"
a=$(attr $ck44 data_pos_1) b=$(attr $ck44 data_pos_2)
awk -v a=$a -v b=$b 'BEGIN {n = 320; s = sqrt(n * 0.7 * 0.3); z = (a - 0.7 * n) / s;
    printf "mixture: %d from train_000 and %d from train_001 of %d (expected 224 / 96, sigma %.1f, z %.2f)\n", a, b, n, s, z;
    exit !(a + b == n && z <= 4 && z >= -4)}' || fail "mixture proportions outside 4 sigma"

# (4) dp = 2: the same run
run_one dp2 2 none
same_series "losses dp1 vs dp2" 1e-5 <(field loss $m) <(field loss $TEST_DIR/dp2/metrics.jsonl) || fail "dp2 losses differ"
same_series "grad norms dp1 vs dp2" 1e-5 <(field grad_norm $m) <(field grad_norm $TEST_DIR/dp2/metrics.jsonl) || fail "dp2 norms differ"
for k in 0 1 2; do
    [ "$(attr $ck44 data_pos_$k)" = "$(attr $TEST_DIR/dp2/ckpt_step00000044.h5 data_pos_$k)" ] ||
        fail "data_pos_$k differs between dp 1 and dp 2"
done
echo "dp2: per-source positions at step 44 equal to dp1's"

# (5) bad input
bad() { # name expected-substring, stages text on stdin
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=8
    cat >>$TEST_DIR/$1.nml
    timeout 60 $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.out 2>$TEST_DIR/$1.err
    local rc=$?
    [ $rc -eq 2 ] || { cat $TEST_DIR/$1.err; fail "$1: exit code $rc, expected 2"; }
    grep -qF -- "$2" $TEST_DIR/$1.err || { cat $TEST_DIR/$1.err; fail "$1: message lacks '$2'"; }
    [ "$(grep -c 'llmtrain: error' $TEST_DIR/$1.err)" = 1 ] || fail "$1: not exactly one error line"
    echo "ok  $1: $(grep 'llmtrain: error' $TEST_DIR/$1.err)"
}
bad backwards "backwards.nml:26:3: &stage until_step (stage 2 of 2): until_step = 3 goes backwards" <<'NML'
&stage until_step = 5 /
&stage
  until_step = 3
/
NML
bad weights_zero "&stage mixture (stage 1 of 1): the weights sum to 0" <<'NML'
&stage
  mixture = 'data/tiny/train_000.bin:0, data/tiny/train_001.bin:0.0'
/
NML
bad no_file "no file matches 'data/tiny/none_*.bin'" <<'NML'
&stage
  mixture = 'data/tiny/train_000.bin:1, data/tiny/none_*.bin:1'
/
NML
grep -q "no_file.nml:25:3: &stage mixture (stage 1 of 1)" $TEST_DIR/no_file.err || fail "no_file: no file:line"
bad seq_too_long "&stage seq_len (stage 1 of 1): seq_len = 64 is above &model seq_len = 32" <<'NML'
&stage
  seq_len = 64
/
NML
bad stage_negative_weight "&stage mixture (stage 1 of 1): source 'data/tiny/train_000.bin:-1': weight '-1' is not a number >= 0" <<'NML'
&stage
  mixture = 'data/tiny/train_000.bin:-1'
/
NML
write_tiny_nml $TEST_DIR/data_mix.nml name=data_mix max_steps=8 train_files=
sed -i "s#^  train_files = ''#  mixture = 'data/tiny/train_000.bin:0.0'\n  train_files = ''#" $TEST_DIR/data_mix.nml
timeout 60 $MPIRUN -np 1 ./llmtrain $TEST_DIR/data_mix.nml >$TEST_DIR/data_mix.out 2>$TEST_DIR/data_mix.err
[ $? -eq 2 ] && grep -q "data_mix.nml:19:3: &data mixture: the weights sum to 0" $TEST_DIR/data_mix.err ||
    { cat $TEST_DIR/data_mix.err; fail "data_mix: no exit 2 with the &data mixture message"; }
echo "ok  data_mix: $(grep 'llmtrain: error' $TEST_DIR/data_mix.err)"
