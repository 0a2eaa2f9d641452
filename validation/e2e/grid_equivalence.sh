#!/usr/bin/env bash
# 3D parallelism equals the serial run: with the same seed and global batch (8 sequences, micro
# batch 1), every valid (dp, tp, pp) with dp*tp*pp in {2, 4, 8} on a tiny 8-layer model trains 10
# steps with losses AND gradient norms (before clipping) within 1e-5 relative of the 1-process run
# and final parameters within 1e-4 (absolute); a 3-layer model on pp = 2 (uneven stages) likewise;
# GPipe and 1F1B give bit-identical losses and norms. tp = 8 is not valid here (4 heads), so it is not run.
source "$(dirname "$0")/lib.bash"
grid_nml() { # name dp tp pp schedule n_layer
    cat >"$TEST_DIR/$1.nml" <<NML
&run name = '$1', out_dir = '$TEST_DIR', seed = 7 /
&model n_layer = $6, n_head = 4, d_model = 32, d_ff = 128, vocab_size = 500, seq_len = 16 /
&parallel dp = $2, tp = $3, pp = $4, schedule = '$5' /
&train max_steps = 10, micro_batch = 1, global_batch = 8, lr = 3e-3, warmup_steps = 2 /
&data train_files = 'data/tiny/train_*.bin' /
&log every = 10 /
NML
}
run_grid() { # name np
    timeout 300 $MPIRUN -np "$2" ./llmtrain "$TEST_DIR/$1.nml" >"$TEST_DIR/$1.log" 2>&1 ||
        { tail -20 "$TEST_DIR/$1.log"; fail "$1 exited non-zero"; }
}
compare() { # reference name
    paste <(losses "$TEST_DIR/$1/metrics.jsonl") <(losses "$TEST_DIR/$2/metrics.jsonl") |
        awk -v n="$2" '{e = ($1 - $2) / $1; if (e < 0) e = -e; if (e > w) w = e; c++}
            END {printf "%-18s 10 losses, worst rel.err %.1e", n, w; exit !(c == 10 && w <= 1e-5)}' ||
        fail "$2: losses differ from $1 by more than 1e-5 relative"
    same_series " | norms" 1e-5 <(norms "$TEST_DIR/$1/metrics.jsonl") <(norms "$TEST_DIR/$2/metrics.jsonl") | tr -d '\n' ||
        fail "$2: gradient norms differ from $1 by more than 1e-5 relative"
    $PYTHON validation/compare_weights.py --atol 1e-4 "$TEST_DIR/$1/weights_step000010.h5" \
        "$TEST_DIR/$2/weights_step000010.h5" >"$TEST_DIR/$2.weights" ||
        { cat "$TEST_DIR/$2.weights"; fail "$2: final weights differ by more than 1e-4"; }
    echo " | weights: $(tail -1 "$TEST_DIR/$2.weights" | sed 's/tolerances.*//')"
}
grid_nml serial 1 1 1 1f1b 8
run_grid serial 1
for g in 2,1,1 1,2,1 1,1,2 4,1,1 2,2,1 1,4,1 2,1,2 1,2,2 1,1,4 \
         8,1,1 4,2,1 2,4,1 4,1,2 2,2,2 1,4,2 2,1,4 1,2,4 1,1,8; do
    IFS=, read -r dp tp pp <<<"$g"
    name=dp${dp}tp${tp}pp${pp}
    grid_nml $name $dp $tp $pp 1f1b 8
    run_grid $name $((dp * tp * pp))
    compare serial $name
    if [ "$pp" -gt 1 ] && [ $((dp * tp * pp)) -le 4 ]; then
        grid_nml ${name}_gpipe $dp $tp $pp gpipe 8
        run_grid ${name}_gpipe $((dp * tp * pp))
        cmp <(losses "$TEST_DIR/$name/metrics.jsonl") <(losses "$TEST_DIR/${name}_gpipe/metrics.jsonl") ||
            fail "$name: GPipe and 1F1B losses are not bit-identical"
        cmp <(norms "$TEST_DIR/$name/metrics.jsonl") <(norms "$TEST_DIR/${name}_gpipe/metrics.jsonl") ||
            fail "$name: GPipe and 1F1B gradient norms are not bit-identical"
        echo "$name: GPipe and 1F1B losses and gradient norms bit-identical"
    fi
done
grid_nml serial3 1 1 1 1f1b 3
grid_nml uneven 1 1 2 1f1b 3
run_grid serial3 1
run_grid uneven 2
compare serial3 uneven
grep "pipeline:" "$TEST_DIR/uneven.log"
