#!/usr/bin/env bash
# Bad Mixture-of-Experts input: top_k > n_experts, ep not dividing dp, ep not dividing
# n_experts, moe_every > n_layer, capacity_factor < 0, drop_policy and router outside their
# choices, ep > 1 on a dense model, d_ff_expert not divisible by tp, experts past 1 TiB per rank
# per rank. Each runs on the ranks its
# grid needs (2) and must end within 30 s with exit code 2 on every rank (each rank's own exit
# code is recorded by a wrapper around it, mpirun told not to kill the others when one exits),
# exactly one "llmtrain: error" line naming the key (and the value where one is given), and no
# crash or MPI abort banner.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
NP=2
write_tiny_nml $g/good.nml dp=2 gb=8 max_steps=1 val_every=0
sed -i "s/seq_len = 32/seq_len = 32, n_experts = 4, top_k = 2, d_ff_expert = 64/" $g/good.nml

# moe_case NAME WANT SED_SCRIPT: good.nml edited by SED_SCRIPT must fail as the header says.
moe_case() {
    local name=$1 want=$2 nml=$g/$1.nml rc r t0 dt
    sed -e "$3" $g/good.nml >"$nml"
    cmp -s "$nml" $g/good.nml && fail "$name: the edit '$3' changed nothing"
    rm -f "$g/$name".rc.*
    t0=$(date +%s)
    # orte_abort_on_non_zero_status = 0: mpirun does not kill the other ranks' wrappers when the
    # first rank exits 2 (else one may die between llmtrain's exit and writing its code); the
    # codes are then the wrappers' files, every one of which must say 2
    OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 30 $MPIRUN -np $NP \
        sh -c './llmtrain "$1"; rc=$?; echo $rc >"$2.rc.$OMPI_COMM_WORLD_RANK"; exit $rc' \
        sh "$nml" "$g/$name" >"$g/$name.out" 2>"$g/$name.err"
    rc=$?
    dt=$(($(date +%s) - t0))
    [ $rc -eq 124 ] && fail "$name: still running after 30 s (a hang)"
    for r in $(seq 0 $((NP - 1))); do
        [ -f "$g/$name.rc.$r" ] || fail "$name: rank $r recorded no exit code (killed?)"
        [ "$(cat "$g/$name.rc.$r")" = 2 ] || fail "$name: rank $r exited with $(cat "$g/$name.rc.$r"), expected 2"
    done
    local n; n=$(grep -c "llmtrain: error" "$g/$name.err")
    [ "$n" -eq 1 ] || { cat "$g/$name.err"; fail "$name: $n error lines, expected exactly 1"; }
    grep -qF -- "$want" "$g/$name.err" || { cat "$g/$name.err"; fail "$name: message lacks '$want'"; }
    if grep -qiE "core dumped|segmentation|MPI_ABORT was invoked" "$g/$name.err" "$g/$name.out"; then
        fail "$name: crash/abort banner"
    fi
    echo "ok  $name (${dt}s, every rank 2): $(grep 'llmtrain: error' "$g/$name.err")"
}

# the good input runs (so each case fails for its own edit)
timeout 60 $MPIRUN -np $NP ./llmtrain $g/good.nml >$g/good.out 2>&1 || { tail $g/good.out; fail "the good MoE input failed"; }

moe_case top_k_exceeds_experts "&model top_k: top_k = 5" "s/top_k = 2/top_k = 5/"
grep -qF "n_experts = 4" $g/top_k_exceeds_experts.err || fail "top_k_exceeds_experts: n_experts not named"
moe_case ep_does_not_divide_dp "&parallel ep: ep = 4" "s/dp = 2/dp = 2, ep = 4/"
grep -qF "must divide dp = 2" $g/ep_does_not_divide_dp.err || fail "ep_does_not_divide_dp: dp not named"
moe_case ep_does_not_divide_experts "&parallel ep: ep = 2" "s/dp = 2/dp = 2, ep = 2/; s/n_experts = 4/n_experts = 3/"
grep -qF "must divide n_experts = 3" $g/ep_does_not_divide_experts.err || fail "ep_does_not_divide_experts: n_experts not named"
moe_case moe_every_exceeds_layers "&model moe_every: moe_every = 3" "s/n_experts = 4/n_experts = 4, moe_every = 3/"
grep -qF "n_layer = 2" $g/moe_every_exceeds_layers.err || fail "moe_every_exceeds_layers: n_layer not named"
moe_case negative_capacity "capacity_factor" "s/n_experts = 4/n_experts = 4, capacity_factor = -0.5/"
grep -qF -- "-0.5" $g/negative_capacity.err || fail "negative_capacity: the value is not named"
moe_case bad_drop_policy "drop_policy" "s/n_experts = 4/n_experts = 4, drop_policy = 'x'/"
grep -qF "'x'" $g/bad_drop_policy.err || fail "bad_drop_policy: the value is not named"
moe_case bad_router "router" "s/n_experts = 4/n_experts = 4, router = 'x'/"
grep -qF "'x'" $g/bad_router.err || fail "bad_router: the value is not named"
moe_case ep_without_experts "&parallel ep: ep = 2" "s/dp = 2/dp = 2, ep = 2/; s/n_experts = 4, top_k = 2, d_ff_expert = 64/n_experts = 0/"
grep -qF "n_experts = 0" $g/ep_without_experts.err || fail "ep_without_experts: n_experts not named"
moe_case d_ff_expert_vs_tp "d_ff_expert" "s/dp = 2/dp = 1, tp = 2/; s/global_batch = 8/global_batch = 4/; s/d_ff_expert = 64/d_ff_expert = 63/"
grep -qF "tp = 2" $g/d_ff_expert_vs_tp.err || fail "d_ff_expert_vs_tp: tp not named"
# experts whose parameters, gradients and AdamW moments exceed the 1 TiB per rank the
# configuration accepts (2 layers x 1024 experts x 2 x 8192 x 4096: 1.4e11 parameters; more than
# 2^31 on a rank alone is accepted): refused by the configuration naming the experts' keys first,
# also under --plan, whose memory plan (memory_limit_gb = 4000) would otherwise say it fits
moe_case experts_past_1tib "more than the 1 TiB llmtrain accepts per rank" \
    "s/n_experts = 4, top_k = 2, d_ff_expert = 64/n_experts = 1024, top_k = 2, d_ff_expert = 8192/; s/d_model = 64/d_model = 4096/; s/n_head = 4/n_head = 32/"
grep -qF "use a smaller model or fewer or narrower experts, a larger &parallel ep, tp or pp (&model n_experts: line" \
    $g/experts_past_1tib.err || fail "experts_past_1tib: the experts are not named"
sed -i "s/^&run/\&run memory_limit_gb = 4000,/" $g/experts_past_1tib.nml
./llmtrain --plan $g/experts_past_1tib.nml >$g/experts_plan.out 2>&1 && fail "experts_past_1tib: --plan says it fits"
grep -qF "more than the 1 TiB llmtrain accepts per rank" $g/experts_plan.out || { tail -3 $g/experts_plan.out; fail "experts_past_1tib: --plan gives no reason"; }
echo "PASS"
