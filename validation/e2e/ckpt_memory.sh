#!/usr/bin/env bash
# Sharded checkpoint I/O keeps memory bounded: a save and a load raise no rank's resident size by
# more than the staging buffer plus 10% of training's peak (save_peak_rss_mib <= train_peak_rss_mib
# + staging_mib + 10% in the checkpoint record; load_peak_rss_mib likewise against the resumed
# run's training peak). A model of 3.6 M parameters (43 MiB of fp32 parameters and AdamW moments)
# with &checkpoint staging_mb = 1, on ZeRO-3 over dp 4 (11 MiB of state a rank; gathering the
# stage on one rank, as saves once did, adds 43 MiB there) and on dp 2 x tp 2 x pp 2 with ZeRO-1.
# The load is checked for being what was saved: the resumed run's steps equal the uninterrupted
# run's bit for bit.
source "$(dirname "$0")/lib.bash"
nml() { # name dp tp pp zero_stage max_steps resume
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 5 /
&model n_layer = 4, n_head = 4, d_model = 256, d_ff = 1024, vocab_size = 2000, seq_len = 16 /
&parallel dp = $2, tp = $3, pp = $4, zero_stage = $5 /
&train max_steps = $6, micro_batch = 1, global_batch = 4, lr = 1e-3, warmup_steps = 1 /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint every = 2, keep = 3, resume = '$7', staging_mb = 1 /
&log every = 1 /
NML
}
# within NAME RECORD_KEY PEAK_KEY: the record's peak against its training peak + staging + 10%
within() {
    $PYTHON - "$TEST_DIR/$1/metrics.jsonl" "$2" "$3" "$1" <<'PY' || fail "$1: $2 over its bound"
import json, sys
path, key, peak_key, name = sys.argv[1:]
recs = [json.loads(l) for l in open(path)]
train = [r for r in recs if "train_peak_rss_mib" in r]
assert train, "no checkpoint record with train_peak_rss_mib"
got = [r for r in recs if key in r]
assert got, "no record with " + key
staging = train[-1]["staging_mib"]
ok = True
for r in got:
    base = r["train_peak_rss_mib"] if "train_peak_rss_mib" in r else train[-1]["train_peak_rss_mib"]
    bound = base * 1.10 + staging
    print(f"{name}: step {r['step']}: {key} {r[key]:.1f} MiB, training peak {base:.1f} MiB, "
          f"bound {bound:.1f} MiB")
    ok = ok and r[key] <= bound
sys.exit(0 if ok else 1)
PY
}
for g in 4,1,1,3 2,2,2,1; do
    IFS=, read -r dp tp pp z <<<"$g"
    np=$((dp * tp * pp)) name=full_${dp}${tp}${pp}
    nml $name $dp $tp $pp $z 4 none
    $MPIRUN -np $np ./llmtrain $TEST_DIR/$name.nml >$TEST_DIR/$name.log 2>&1 ||
        { tail $TEST_DIR/$name.log; fail "$name failed"; }
    grep "^checkpoint:" $TEST_DIR/$name.log
    within $name save_peak_rss_mib save_peak_rss_mib
    nml res_${dp}${tp}${pp} $dp $tp $pp $z 4 $TEST_DIR/$name/ckpt_step00000002.h5
    $MPIRUN -np $np ./llmtrain $TEST_DIR/res_${dp}${tp}${pp}.nml >$TEST_DIR/res.log 2>&1 ||
        { tail $TEST_DIR/res.log; fail "resume of $name failed"; }
    grep "^resume: .*step 2" $TEST_DIR/res.log || fail "res_${dp}${tp}${pp} did not resume from step 2"
    within res_${dp}${tp}${pp} load_peak_rss_mib train_peak_rss_mib
    want=$(train_records $TEST_DIR/$name/metrics.jsonl | tail -2 | tr '\n' ' ')
    got=$(train_records $TEST_DIR/res_${dp}${tp}${pp}/metrics.jsonl | tr '\n' ' ')
    [ "$got" = "$want" ] || fail "resume on $g not bit-identical: $got vs $want"
    echo "res_${dp}${tp}${pp}: steps 3-4 bit-identical to the uninterrupted run"
done
echo "PASS"
