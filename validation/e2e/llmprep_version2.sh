#!/usr/bin/env bash
# llmprep writes llm.c's version-2 shards (uint32 ids), checked with numpy reading the header and
# the uint32 body itself (no llmtrain code), 2 ranks:
#  1. a vocabulary trained on the input (700 ids) with --shard-version 2: every shard's header is
#     (20240520, 2, count, 0 ...), its size 1024 + 4 count, its ids those of the same run's
#     version-1 shards (default for 700 ids) widened; the manifest says version 2 and its sha256s
#     match the files.
#  2. that vocabulary grown past 65,536 ids (70000: ranks 699 .. 69998 added as tokens no text can
#     form, "q<rank> q" across a pre-token boundary, and <|endoftext|> = 69999): version 2 without
#     asking, the ids those of (1) with <|endoftext|> 699 -> 69999; --shard-version 1 is refused
#     (exit 2, one message naming --shard-version and 65536).
#  3. llmtrain trains 3 steps on (2) with &model vocab_size = 70000 (exit 0, 3 finite losses).
source "$(dirname "$0")/lib.bash"
ulimit -c 0
T=$TEST_DIR
make --no-print-directory -s llmprep >"$T/make.log" 2>&1 || { cat "$T/make.log"; fail "make llmprep failed"; }
$PYTHON validation/tokenizer/make_test_text.py fuzz 2 1500 $T/fuzz.txt
C=validation/tokenizer/corpus
FILES="$C/english.txt $C/languages.txt $C/code.py.txt $T/fuzz.txt"
ARGS="--shard-tokens 3000 --val-fraction 0.1"
prep() { # out args...
    local out=$1; shift
    timeout 120 $MPIRUN -np 2 ./llmprep --out "$out" "$@" >"$out.log" 2>&1 || { cat "$out.log"; fail "llmprep $*"; }
}
prep $T/v1 --train-vocab 700 $ARGS $FILES
prep $T/v2 --train-vocab 700 --shard-version 2 $ARGS $FILES
$PYTHON - "$T/v1/tokenizer.tiktoken" "$T/big.tiktoken" <<'PY' || fail "growing the vocabulary"
import base64, sys
lines = open(sys.argv[1]).read().splitlines()
with open(sys.argv[2], "w") as f:
    f.write("\n".join(lines) + "\n")
    for r in range(len(lines), 69999):  # "q<r> q": the space starts a new pre-token, never formed
        f.write("%s %d\n" % (base64.b64encode(b"q%d q" % r).decode(), r))
PY
prep $T/big --tokenizer $T/big.tiktoken $ARGS $FILES

$PYTHON - "$T" <<'PY' || fail "the version-2 shards do not hold what llm.c's layout says"
import glob, hashlib, json, os, sys
import numpy as np
T = sys.argv[1]
def read(path, version):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], np.int32)
    width = 2 if version == 1 else 4
    assert h[0] == 20240520 and h[1] == version and not h[3:].any(), (path, h[:4])
    assert len(raw) == 1024 + width * int(h[2]), (path, len(raw), int(h[2]))
    return np.frombuffer(raw[1024:], np.uint16 if version == 1 else np.uint32).astype(np.int64), raw
def check_dir(d, version):
    m = json.load(open(os.path.join(d, "manifest.json")))
    assert m["shard_version"] == version and ("uint32" if version == 2 else "uint16") in m["format"], m["format"]
    out = {}
    for s in m["shards"]:
        ids, raw = read(os.path.join(d, s["file"]), version)
        assert len(ids) == s["tokens"] and hashlib.sha256(raw).hexdigest() == s["sha256"], s["file"]
        out[s["file"]] = ids
    assert sorted(out) == sorted(os.path.basename(p) for p in glob.glob(d + "/*_*.bin"))
    return m, out
m1, v1 = check_dir(T + "/v1", 1)
m2, v2 = check_dir(T + "/v2", 2)
mb, big = check_dir(T + "/big", 2)
assert v1.keys() == v2.keys() == big.keys()
n = sum(len(a) for a in v1.values())
assert m1["eot_token"] == 699 and mb["eot_token"] == 69999 and mb["vocab_size"] == 70000
for f in v1:
    assert np.array_equal(v1[f], v2[f]), f
    want = np.where(v1[f] == 699, 69999, v1[f])
    assert np.array_equal(want, big[f]), (f, np.flatnonzero(want != big[f])[:5])
print("ok  %d shards, %d tokens: version 2 = version 1 widened; the 70000-id vocabulary: version 2 by "
      "default, %d ids above 65535" % (len(v1), n, sum(int((a > 65535).sum()) for a in big.values())))
PY

timeout 60 $MPIRUN -np 2 ./llmprep --out $T/big1 --tokenizer $T/big.tiktoken --shard-version 1 $FILES >$T/big1.out 2>$T/big1.err
rc=$?
[ $rc -eq 2 ] || { cat $T/big1.err; fail "--shard-version 1 with 70000 ids: exit $rc, expected 2"; }
[ "$(grep -c 'llmprep: error' $T/big1.err)" -eq 1 ] || { cat $T/big1.err; fail "expected one error line"; }
grep -F "llmprep: error: --shard-version 1: $T/big.tiktoken has 70000 token ids, more than version 1's uint16 ids hold (65536)" $T/big1.err ||
    { cat $T/big1.err; fail "message"; }

cat >$T/train.nml <<NML
&run name = 'big', out_dir = '$T', seed = 3 /
&model n_layer = 2, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 70000, seq_len = 16 /
&train max_steps = 3, micro_batch = 2, global_batch = 4, lr = 1e-3 /
&data train_files = '$T/big/train_*.bin', tokenizer = '$T/big.tiktoken' /
&log every = 1 /
NML
timeout 120 $MPIRUN -np 1 ./llmtrain $T/train.nml >$T/train.log 2>&1 || { tail -20 $T/train.log; fail "training on llmprep's version-2 shards"; }
[ "$(losses $T/big/metrics.jsonl | grep -cE '^[0-9]+\.[0-9]+$')" -eq 3 ] || fail "expected 3 finite losses"
echo "ok  llmtrain trained 3 steps on them: losses $(losses $T/big/metrics.jsonl | tr '\n' ' ')"
