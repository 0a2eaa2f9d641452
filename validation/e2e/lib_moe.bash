# lib_moe.bash — the tiny MoE model and its step-record comparisons for the MoE scenario tests
# (sourced after lib.bash).
#   moe_nml [write_tiny_nml key=value ...]   $TEST_DIR/moe.nml: tiny.nml's GPT-2 (2 layers,
#                     d_model 64), 6 steps, micro-batch 2, global batch 8, logged every step; the
#                     MoE keys and the grid come as command-line overrides (run_moe)
#   run_moe NAME NP [group.key=value ...]    one run of it on NP ranks (run directory NAME)
#   moe_header; moe_compare REF NAME [FROM]  one table row: NAME's step records from step FROM
#                     (default 1) against REF's same steps; fails past the tolerances below
# The micro-batch size stays 2 on every grid: the capacity ceil(N k cf / E) is per micro-batch.

# Every MoE block: 4 experts, top-2, capacity factor 1.0 (some assignments are dropped, and the
# drops must not depend on the grid), expert width 64.
MOE_KEYS=(model.n_experts=4 model.top_k=2 model.capacity_factor=1.0 model.d_ff_expert=64)
MOE_LAYERS="0 1"

moe_nml() { write_tiny_nml "$TEST_DIR/moe.nml" max_steps=6 mb=2 gb=8 val_every=0 "$@"; }

run_moe() {
    local name=$1 np=$2; shift 2
    timeout 120 $MPIRUN -np "$np" ./llmtrain "$TEST_DIR/moe.nml" run.name="$name" "${MOE_KEYS[@]}" "$@" \
        </dev/null >"$TEST_DIR/$name.log" 2>&1 || { tail -20 "$TEST_DIR/$name.log"; fail "$name exited non-zero"; }
}

# step_records FILE FROM: the step records (those with a training loss) of steps >= FROM
step_records() { grep '^{"step":[0-9]*,"loss":' "$1" | awk -F'[:,]' -v s="$2" '$2 >= s'; }
# scalar FILE FROM KEY: KEY's value in each step record, one per line
scalar() { step_records "$1" "$2" | sed -n "s/.*\"$3\":\([^,}]*\).*/\1/p"; }
# loads FILE FROM L: moe<L>_load of each step record, e.g. [95,131,150,136]
loads() { step_records "$1" "$2" | grep -o "\"moe$3_load\":\[[^]]*\]" | sed 's/.*://'; }

# worst_rel TOL A B: two columns of numbers of the same non-zero length; prints the worst
# relative error, non-zero status past TOL
worst_rel() {
    paste "$2" "$3" | awk -v tol="$1" '
        NF != 2 {bad = 1} {e = ($1 - $2) / ($1 == 0 ? 1 : $1); if (e < 0) e = -e; if (e > w) w = e; c++}
        END {printf "%.1e", w; exit !(c > 0 && !bad && w <= tol)}'
}

# Tolerances: the grids differ only in the order of fp32 sums.
MOE_TOL_LOSS=1e-6 MOE_TOL_NORM=1e-5 MOE_TOL_AUX=1e-6 MOE_TOL_Z=1e-6

moe_header() {
    printf '%-26s %5s %9s %9s %9s %9s  %s\n' run steps loss norm aux z "loads (exact)"
    printf '%-26s %5s %9s %9s %9s %9s  %s\n' "(worst rel.err; tol)" "" $MOE_TOL_LOSS $MOE_TOL_NORM \
        $MOE_TOL_AUX $MOE_TOL_Z ""
}

moe_compare() {
    local ref=$TEST_DIR/$1/metrics.jsonl got=$TEST_DIR/$2/metrics.jsonl from=${3:-1} bad="" l
    local n_ref n_got e_loss e_norm e_aux e_z ld="identical"
    n_ref=$(step_records "$ref" "$from" | wc -l) n_got=$(step_records "$got" "$from" | wc -l)
    [ "$n_ref" -gt 0 ] && [ "$n_ref" -eq "$n_got" ] || bad+=" steps($n_got, $1 has $n_ref)"
    e_loss=$(worst_rel $MOE_TOL_LOSS <(scalar "$ref" "$from" loss) <(scalar "$got" "$from" loss)) || bad+=" loss"
    e_norm=$(worst_rel $MOE_TOL_NORM <(scalar "$ref" "$from" grad_norm) <(scalar "$got" "$from" grad_norm)) ||
        bad+=" grad_norm"
    e_aux=$(worst_rel $MOE_TOL_AUX <(scalar "$ref" "$from" moe_aux_loss) <(scalar "$got" "$from" moe_aux_loss)) ||
        bad+=" moe_aux_loss"
    e_z=$(worst_rel $MOE_TOL_Z <(scalar "$ref" "$from" moe_z_loss) <(scalar "$got" "$from" moe_z_loss)) ||
        bad+=" moe_z_loss"
    for l in $MOE_LAYERS; do
        [ "$(loads "$ref" "$from" "$l" | wc -l)" -eq "$n_ref" ] || bad+=" moe${l}_load(missing in $1)"
        cmp -s <(loads "$ref" "$from" "$l") <(loads "$got" "$from" "$l") || { bad+=" moe${l}_load" ld="DIFFER"; }
    done
    printf '%-26s %5s %9s %9s %9s %9s  %s\n' "$2" "$n_got" "$e_loss" "$e_norm" "$e_aux" "$e_z" "$ld"
    [ -z "$bad" ] || {
        [ "$ld" = identical ] || for l in $MOE_LAYERS; do
            paste <(loads "$ref" "$from" "$l") <(loads "$got" "$from" "$l") | sed "s/^/  moe${l}_load $1 vs $2: /"
        done
        fail "$2 differs from $1 (steps >= $from) in:$bad"
    }
}
