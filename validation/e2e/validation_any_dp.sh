#!/usr/bin/env bash
# Validation with val_batches not a multiple of dp, where a forward pass has dp-group collectives:
# ZeRO-3 (the per-block weight gathers) and expert parallelism (the experts' all-to-all). Each dp
# rank takes batches i = rank, rank + dp, ...; a rank left without a batch of its own must still
# join every pass (it once ran fewer forwards than the others, and the job hung in the gathers
# until the watchdog ended it, exit 4, the final checkpoint lost). Each run: 4 steps, validation
# at steps 2 and 4, 3 validation batches; the watchdog at 60 s, so a hang fails fast.
# Reference: the same configuration on 1 rank. Validation losses within 1e-6 relative (the sum is
# reduced in another order), training losses and gradient norms within 1e-5, and the run ends
# with exit 0 and its final weights written.
#  1. ZeRO-3, dp 2 (val_batches 3: rank 1 has one batch, rank 0 two)
#  2. ZeRO-3, dp 4 (val_batches 3: rank 3 has none)
#  3. MoE, 4 experts top-2, ep 2 on dp 2 (val_batches 3)
#  4. ZeRO-3 with pp 2 (1F1B) on dp 2, val_batches 1
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/lib_moe.bash"
write_tiny_nml "$TEST_DIR/v.nml" max_steps=4 mb=2 gb=8 val_every=2
BASE=(parallel.zero_stage=3 checkpoint.timeout_s=60 data.val_batches=3) # later overrides win
MOE=(model.n_experts=4 model.top_k=2 model.capacity_factor=1.0 model.d_ff_expert=64)

run() { # name np overrides...
    local name=$1 np=$2; shift 2
    timeout 300 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/v.nml" run.name="$name" "${BASE[@]}" "$@" </dev/null \
        >"$TEST_DIR/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { tail -15 "$TEST_DIR/$name.log"; fail "$name: exit $rc (4: the watchdog ended a hang)"; }
    ls "$TEST_DIR/$name"/weights_step000004.h5 >/dev/null 2>&1 || fail "$name: no final weights"
}
vals() { grep -o '"val_loss":[^,}]*' "$1" | cut -d: -f2; }
compare() { # ref name
    local a=$TEST_DIR/$1/metrics.jsonl b=$TEST_DIR/$2/metrics.jsonl ev el en
    [ "$(vals "$a" | wc -l)" -eq 2 ] || fail "$1: $(vals "$a" | wc -l) validations, want 2 (steps 2 and 4)"
    ev=$(worst_rel 1e-6 <(vals "$a") <(vals "$b")) || fail "$2: validation losses differ from $1 ($ev)"
    el=$(worst_rel 1e-5 <(losses "$a") <(losses "$b")) || fail "$2: training losses differ from $1 ($el)"
    en=$(worst_rel 1e-5 <(norms "$a") <(norms "$b")) || fail "$2: gradient norms differ from $1 ($en)"
    printf '%-12s vs %-10s: 2 validations, worst rel.err val %s, loss %s, norm %s\n' "$2" "$1" "$ev" "$el" "$en"
}

run serial 1
run zero3_dp2 2 parallel.dp=2
compare serial zero3_dp2
run zero3_dp4 4 parallel.dp=4
compare serial zero3_dp4
run moe_serial 1 "${MOE[@]}"
run moe_ep2 2 "${MOE[@]}" parallel.dp=2 parallel.ep=2
compare moe_serial moe_ep2
run serial_v1 1 data.val_batches=1
run zero3_pp2 4 parallel.dp=2 parallel.pp=2 data.val_batches=1
compare serial_v1 zero3_pp2
echo "validation_any_dp: every dp rank joins every validation pass; losses equal the serial run's"
