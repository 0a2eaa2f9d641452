#!/usr/bin/env bash
# llmmerge refuses bad input with one message naming the key (file:line:col) or the tensor, and
# exit code 2 on every rank (run on 2 ranks): unknown method, key or parameter of the method,
# weights that sum to 0 with normalize on, density outside (0, 1], t outside [0, 1], models of
# other shapes (d_ff, n_layer) or vocabularies, a corrupt input (checksum), a missing file, a
# pattern matching nothing, an existing out, a missing base, a repeat count on a one-value key,
# a dataset whose shape is not its model's (a chunked [2^30, 64] wte, a few KB on disk: refused
# by the registry's shape before anything is allocated, here under an 8 GiB address-space limit;
# it was exit 3 or an allocation of 256 GiB). No output (nor .tmp) is left.
source "$(dirname "$0")/lib.bash"
ulimit -v 8388608 # 8 GiB per process: an allocation of what a file's shape claims fails instead of swapping
[ -x ./llmmerge ] || fail "./llmmerge is not built (make)"
model() { # name sed-expression: a model of step 0 whose &model is changed by the expression
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=0 val_every=0
    sed -i "$2" $TEST_DIR/$1.nml
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "making $1 failed"; }
}
model a 's/seed = 1337/seed = 1/'
model b 's/seed = 1337/seed = 2/'
model dff 's/d_ff = 256/d_ff = 128/'
model deep 's/n_layer = 2/n_layer = 3/'
model vocab 's/vocab_size = 500/vocab_size = 510/'
A=$TEST_DIR/a/weights_step000000.h5 B=$TEST_DIR/b/weights_step000000.h5
cp $B $TEST_DIR/corrupt.h5
$PYTHON - "$TEST_DIR/corrupt.h5" <<'EOF' || fail "could not corrupt a copy"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:  # the last tensor by name: merged by rank 1 of 2
    off = f["model/wte"].id.get_offset() + 4 * 1234
with open(sys.argv[1], "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10]))
EOF
# huge.h5, huge2.h5: model a with wte replaced by a chunked [2^30, 64] float32 dataset (2^36
# elements, 256 GiB as floats) that holds no chunk: a few KB on disk, with a checksum attribute.
$PYTHON - "$A" "$TEST_DIR/huge.h5" "$TEST_DIR/huge2.h5" <<'EOF' || fail "could not make huge.h5"
import shutil, sys, h5py, os
for out in sys.argv[2:]:
    shutil.copy(sys.argv[1], out)
    with h5py.File(out, "r+") as f:
        del f["model/wte"]
        d = f["model"].create_dataset("wte", shape=(1 << 30, 64), dtype="<f4", chunks=(1024, 64))
        d.attrs.create("checksum", 0, dtype="<u8")
    assert os.path.getsize(out) < 10 << 20, os.path.getsize(out)
EOF
OUT=$TEST_DIR/out.h5
n=0
expect() { # what-is-expected 'namelist body' [KEY=VALUE ...]: exit 2, one message containing it
    local want=$1 body=$2; shift 2
    n=$((n + 1))
    printf '&merge\n%b\n/\n' "$body" >$TEST_DIR/bad$n.nml
    $MPIRUN -np 2 ./llmmerge $TEST_DIR/bad$n.nml "$@" >$TEST_DIR/bad$n.log 2>&1
    local rc=$? msgs
    msgs=$(grep -c 'llmmerge: error' $TEST_DIR/bad$n.log)
    echo "case $n (exit $rc): $(grep 'llmmerge: error' $TEST_DIR/bad$n.log | head -1)"
    [ $rc -eq 2 ] || { cat $TEST_DIR/bad$n.log; fail "case $n: exit code $rc, expected 2"; }
    [ "$msgs" -eq 1 ] || { cat $TEST_DIR/bad$n.log; fail "case $n: $msgs error messages, expected 1"; }
    grep 'llmmerge: error' $TEST_DIR/bad$n.log | grep -qF -- "$want" || fail "case $n: the message does not say '$want'"
    [ ! -e $OUT ] && [ ! -e $OUT.tmp ] || fail "case $n: an output was left behind"
}
ok="models = '$A', '$B'\n  out = '$OUT'"
expect "bad1.nml:2:12: &merge method: unknown method 'tie'" "  method = 'tie'\n  $ok"
expect "did you mean 'ties'?" "  method = 'tie'\n  $ok"
expect "bad3.nml:3:3: &merge unknown key 'wieghts'" "  method = 'linear'\n  wieghts = 1, 2\n  $ok"
expect "did you mean 'weights'?" "  method = 'linear'\n  wieghts = 1, 2\n  $ok"
expect "&merge density: not a parameter of method 'linear' (density is for: ties, dare_linear, dare_ties)" "  method = 'linear'\n  density = 0.5\n  $ok"
expect "&merge t: not a parameter of method 'ties'" "  method = 'ties'\n  base = '$A'\n  t = 0.5\n  models = '$B'\n  out = '$OUT'"
expect "&merge weights: they sum to 0 and normalize is on" "  method = 'linear'\n  weights = 1, -1\n  $ok"
expect "&merge weights: they sum to 0 and normalize is on" "  method = 'ties'\n  base = '$A'\n  models = '$B'\n  weights = 0\n  out = '$OUT'"
expect "bad9.nml:3:13: &merge density: must be in (0, 1], got 0" "  method = 'ties'\n  density = 0\n  base = '$A'\n  models = '$B'\n  out = '$OUT'"
expect "&merge density: must be in (0, 1], got 1.5" "  method = 'dare_ties'\n  density = 1.5\n  base = '$A'\n  models = '$B'\n  out = '$OUT'"
expect "&merge density: 3 values for 1 model" "  method = 'dare_linear'\n  density = 0.5, 0.5, 0.5\n  base = '$A'\n  models = '$B'\n  out = '$OUT'"
expect "&merge t: must be in [0, 1], got 1.5" "  method = 'slerp'\n  t = 1.5\n  $ok"
expect "&merge rescale: expected 'l1', '1/density' or 'none', got 'l2'" "  method = 'dare_linear'\n  rescale = 'l2'\n  base = '$A'\n  models = '$B'\n  out = '$OUT'"
expect "&merge base is required by method 'task_arithmetic'" "  method = 'task_arithmetic'\n  $ok"
expect "method 'slerp' interpolates between two models" "  method = 'slerp'\n  models = '$A', '$B', '$A'\n  out = '$OUT'"
expect "tensor /model/h.0.mlp.fc.b has shape [128] in models(2) '$TEST_DIR/dff/weights_step000000.h5' but [256] in models(1)" \
    "  method = 'linear'\n  models = '$A', '$TEST_DIR/dff/weights_step000000.h5'\n  out = '$OUT'"
expect "has a tensor /model/h.2.attn.proj.b that models(1)" "  method = 'linear'\n  models = '$A', '$TEST_DIR/deep/weights_step000000.h5'\n  out = '$OUT'"
expect "has vocab_size = 510 but base '$A' has 500 (tensor /model/wte" "  method = 'ties'\n  base = '$A'\n  models = '$TEST_DIR/vocab/weights_step000000.h5'\n  out = '$OUT'"
expect "models(2) '$TEST_DIR/corrupt.h5': tensor /model/wte fails its checksum" "  method = 'linear'\n  models = '$A', '$TEST_DIR/corrupt.h5'\n  out = '$OUT'"
expect "models(2) '$TEST_DIR/none.h5': cannot read: No such file" "  method = 'linear'\n  models = '$A', '$TEST_DIR/none.h5'\n  out = '$OUT'"
expect "&merge models(1): '$TEST_DIR/nothing_*.h5' matches no file" "  method = 'linear'\n  models = '$TEST_DIR/nothing_*.h5'\n  out = '$OUT'"
expect "&merge last = 3, but models names 2 files" "  method = 'linear'\n  models = '$TEST_DIR/[ab]/weights_step000000.h5'\n  last = 3\n  out = '$OUT'"
expect "argument 2:1:8: &merge unknown key 'wieghts'" "  method = 'linear'\n  $ok" "wieghts=1,2"
expect "is the input models(1)" "  method = 'linear'\n  models = '$A', '$B'\n  out = '$A'\n  overwrite = .true."
touch $OUT.keep
expect "&merge out: '$OUT.keep' exists (set overwrite = .true. to replace it)" "  method = 'linear'\n  models = '$A', '$B'\n  out = '$OUT.keep'"
expect "bad$((n + 1)).nml:3:9: &merge out: expected one value, got 3 values (the repeat count '3*')" \
    "  method = 'linear'\n  out = 3*'$OUT'\n  models = '$A', '$B'"
huge_msg="tensor /model/wte has shape [1073741824, 64], but its model (&model of its namelist) makes it [512, 64]"
expect "models(1) '$TEST_DIR/huge.h5': $huge_msg" "  method = 'linear'\n  models = '$TEST_DIR/huge.h5', '$TEST_DIR/huge2.h5'\n  out = '$OUT'"
expect "models(1) '$TEST_DIR/huge.h5': $huge_msg" "  method = 'linear'\n  models = '$TEST_DIR/huge.h5', '$A'\n  out = '$OUT'"
expect "base '$TEST_DIR/huge.h5': $huge_msg" "  method = 'task_arithmetic'\n  base = '$TEST_DIR/huge.h5'\n  models = '$A'\n  out = '$OUT'"
# and the good case runs (the override replaces out)
printf "&merge\n  method = 'linear'\n  $ok\n/\n" >$TEST_DIR/good.nml
$MPIRUN -np 2 ./llmmerge $TEST_DIR/good.nml "out='$TEST_DIR/good.h5'" >$TEST_DIR/good.log 2>&1 || { cat $TEST_DIR/good.log; fail "the good case failed"; }
[ -f $TEST_DIR/good.h5 ] && [ ! -e $OUT ] || fail "the override of out was not used"
echo "all $n bad inputs refused with exit code 2 and one message; the good one ran"
