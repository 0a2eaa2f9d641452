#!/usr/bin/env bash
# The MoE load-balancing loss balances a router that favours one expert. The tiny model (tiny.nml
# GPT-2, 2 MoE blocks, 4 experts, top-1, dropless: capacity_factor = 0, so the load is the
# router's own choice) starts from llmtrain's step-0 weights edited with h5py so that expert 0 is
# favoured in every MoE block (validation/moe_favour_expert.py): h.L.ln2.b = u (all entries 0.5),
# router rows scaled by 10 (so the tokens' own logits differ by O(1)) and router row 0 += 0.25 u:
# expert 0's logit is raised by 0.25 |u|^2 = 4 for every token (the LayerNorm output before its
# bias has zero mean, so x.u = |u|^2), checksums rewritten. From that file
# (&run init_from), 40 steps at lr 3e-3 (constant), z_loss_coef = 0, with aux_loss_coef = 0 (off)
# and $AUX_ON (on), same data. Checked from metrics.jsonl, per MoE block L:
#   - step 1: identical load and moe<L>_cv in both runs (same start), expert 0 holds > 1/2 of it;
#   - mean moe<L>_cv over the last 10 steps: on <= 0.5 x off, and off >= 0.75 (stays unbalanced;
#     a balanced load has cv 0, all tokens on one expert sqrt(3) = 1.73).
source "$(dirname "$0")/lib.bash"
AUX_ON=1.0
MOE="n_experts = 4, top_k = 1, capacity_factor = 0, z_loss_coef = 0"

moe_nml() { # PATH AUX [write_tiny_nml key=value ...]
    local path=$1 aux=$2; shift 2
    write_tiny_nml "$path" "$@" val_every=0
    sed -i "s/seq_len = 32/seq_len = 32, $MOE, aux_loss_coef = $aux/" "$path"
}

moe_nml "$TEST_DIR/init.nml" 0 name=init max_steps=1
run_ranks init 1
FAV=$TEST_DIR/favoured.h5
$PYTHON validation/moe_favour_expert.py "$TEST_DIR/init/weights_step000000.h5" "$FAV" --offset 4 \
    --router-scale 10 --bias 0.5 || fail "editing the weights failed"

for run in off on; do
    aux=0
    [ $run = on ] && aux=$AUX_ON
    moe_nml "$TEST_DIR/$run.nml" $aux name=$run max_steps=40 lr=3e-3 schedule=constant warmup=0 init_from="$FAV"
    run_ranks $run 1
done

$PYTHON - "$TEST_DIR/off/metrics.jsonl" "$TEST_DIR/on/metrics.jsonl" "$AUX_ON" <<'PY' || fail "the aux loss did not balance the load"
import json, statistics, sys

def steps(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l]

off, on = steps(sys.argv[1]), steps(sys.argv[2])
assert len(off) == len(on) == 40, "expected 40 step records, got %d and %d" % (len(off), len(on))
layers = sorted(int(k[3:-3]) for k in off[0] if k.startswith("moe") and k.endswith("_cv"))
assert layers, "no moe<L>_cv in metrics.jsonl"
ok = True
print("aux_loss_coef 0 vs %s; cv = std/mean of the expert load (0 = balanced, 1.73 = one expert)" % sys.argv[3])
for l in layers:
    cv, load = "moe%d_cv" % l, "moe%d_load" % l
    a, b = off[0][load], on[0][load]
    same = a == b and off[0][cv] == on[0][cv]
    favoured = a[0] > sum(a) / 2
    m_off = statistics.mean(r[cv] for r in off[-10:])
    m_on = statistics.mean(r[cv] for r in on[-10:])
    good = same and favoured and m_on <= 0.5 * m_off and m_off >= 0.75
    ok &= good
    print("block %d: step 1 load off %s on %s (cv %.4f / %.4f)%s; last-10 mean cv off %.3f, on %.3f"
          " (on/off %.2f; need <= 0.5, off >= 0.75): %s; last load off %s on %s"
          % (l, a, b, off[0][cv], on[0][cv], "" if same else " DIFFER", m_off, m_on, m_on / m_off,
             "ok" if good else "FAIL", off[-1][load], on[-1][load]))
    if not favoured:
        print("  expert 0 holds %d of %d assignments at step 1: the favouring did not take" % (a[0], sum(a)))
sys.exit(0 if ok else 1)
PY
echo "PASS"
