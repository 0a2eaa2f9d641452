#!/usr/bin/env bash
# A closed stdout does not end the run: `llmtrain x.nml | head -1` (one process, no mpirun: the
# pipe is llmtrain's own stdout) exits 0, writes its last checkpoint and final weights, has every
# step in metrics.jsonl, and says once on stderr that stdout was closed. Before main.c's stdout
# guard the first write after head had gone raised SIGPIPE: exit 141, no final checkpoint.
# (Under mpirun the pipe is mpirun's stdout, and Open MPI's mpirun itself aborts on SIGPIPE:
# docs/running.md says to redirect to a file there.)
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
write_tiny_nml $g/run.nml name=run max_steps=40 val_every=20
sed -i "s|^&log|\\&checkpoint\\n  every = 20\\n/\\n\\&log|" $g/run.nml
set -o pipefail
timeout -k 5 120 ./llmtrain $g/run.nml 2>$g/run.err | head -1 >$g/head.out
codes=("${PIPESTATUS[@]}")
echo "exit codes: llmtrain ${codes[0]}, head ${codes[1]}; head printed: $(cat $g/head.out)"
[ "${codes[0]}" -eq 0 ] || { tail -5 $g/run.err; fail "llmtrain exited with ${codes[0]}, expected 0 (141: SIGPIPE)"; }
for f in ckpt_step00000040.h5 weights_step000040.h5; do
    [ -f $g/run/$f ] || { ls $g/run; fail "$f is missing"; }
done
last=$(grep -o '"step":[0-9]*,"loss"' $g/run/metrics.jsonl | tail -1)
[ "$last" = '"step":40,"loss"' ] || fail "the last training record is '$last', expected step 40"
n=$(grep -c 'stdout was closed' $g/run.err)
[ "$n" -eq 1 ] || { cat $g/run.err; fail "$n notes about the closed stdout on stderr, expected 1"; }
grep -q 'error' $g/run.err && { cat $g/run.err; fail "an error on stderr"; }
echo "PASS: the run went on after its stdout closed: $(ls $g/run | grep -c "step0*40.h5") files of step 40, one note on stderr"
