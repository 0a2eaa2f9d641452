#!/usr/bin/env bash
# A resumed mixture keeps each source's own data position, whatever order the namelist lists the
# sources in: checkpoints name each position's source (data_source_<k>) and a resume maps them
# by name. The mixture 'train_000:1, train_001:0' draws every sample from train_000 whichever
# order it is written in (the draw is keyed by (seed, sample index)), so the run resumed from
# step 8 with the sources listed in another order must continue bit-identically (losses and
# gradient norms string-equal, final weights identical) to the uninterrupted run:
#   (1) reordered ('train_001:0, train_000:1'): positions matched by name, one note;
#   (2) respelled ('./data/tiny/...'): no name matches, as many on each side: paired in the
#       order listed, a warning per pair naming both;
#   (3) train_001 dropped: train_000 matched by name, a warning that the checkpoint's
#       train_001 position is not used.
# Before names were kept, (1) gave train_000 the position of train_001 (0): it re-read its first
# windows and the losses after step 8 differed.
source "$(dirname "$0")/lib.bash"
A=data/tiny/train_000.bin B=data/tiny/train_001.bin

run_mix() { # name mixture resume
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=12 val_every=0 val_files= train_files=
    sed -i "s#^  train_files = ''#  mixture = '$2'\n  train_files = ''#" $TEST_DIR/$1.nml
    sed -i "s#^&log#\&checkpoint every = 4, keep = 10, resume = '$3' /\n\&log#" $TEST_DIR/$1.nml
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "$1 failed"; }
}
after8() { train_records "$1" | awk -F'[:,]' '$1 == "\"step\"" && $2 > 8'; }

run_mix full "$A:1, $B:0" none
ck=$TEST_DIR/full/ckpt_step00000008.h5
names=$($PYTHON -c "import h5py,sys; a=h5py.File(sys.argv[1],'r').attrs
print(' '.join(f\"{a['data_source_%d' % k].decode() if isinstance(a['data_source_%d' % k], bytes) else a['data_source_%d' % k]}={int(a['data_pos_%d' % k])}\" for k in range(int(a['data_sources']))))" $ck)
[ "$names" = "$A=64 $B=0" ] || fail "checkpoint of step 8 names its sources '$names', want '$A=64 $B=0'"
echo "checkpoint of step 8: $names"
want=$(after8 $TEST_DIR/full/metrics.jsonl)
[ $(echo "$want" | wc -l) -eq 4 ] || fail "the uninterrupted run has no records of steps 9-12"

check() { # name mixture message
    run_mix $1 "$2" $ck
    got=$(after8 $TEST_DIR/$1/metrics.jsonl)
    [ "$got" = "$want" ] || { diff <(echo "$want") <(echo "$got"); fail "$1: steps 9-12 differ from the uninterrupted run"; }
    same_weights $TEST_DIR/full/weights_step000012.h5 $TEST_DIR/$1/weights_step000012.h5 || fail "$1: final weights differ"
    grep -qF "$3" $TEST_DIR/$1.log || { grep resume $TEST_DIR/$1.log; fail "$1: no line '$3'"; }
    echo "$1: steps 9-12 and final weights identical; said: $3"
}
check reordered "$B:0, $A:1" "lists the data sources in another order than the checkpoint: each continues from its own position"
check respelled "./$A:1, ./$B:0" "data source './$A' is not named in the checkpoint: it continues from the position of the checkpoint's '$A'"
check dropped "$A:1" "the checkpoint's data source '$B' is not in the namelist"
