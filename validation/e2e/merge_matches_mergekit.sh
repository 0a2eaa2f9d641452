#!/usr/bin/env bash
# llmmerge's six methods against mergekit's own kernels (validation/merge_reference.py; numpy
# from mergekit's definitions when mergekit is not installed), on random tensors and on three
# tiny trained models (a base and two fine-tunes of it), on 1 to 3 ranks. Tolerance per element:
# |llmmerge - reference| <= 1e-5 |reference| + 1e-6 rms(reference) (float32 rounding); the
# maximum absolute and relative errors of every method are printed. Also: the output of 1 and
# 3 ranks is byte-identical, slerp falls back to lerp on parallel tensors, and a merged file
# loads in llmtrain (mode = 'eval').
source "$(dirname "$0")/lib.bash"
export PYTHONPATH=.deps/python:validation
[ -x ./llmmerge ] || fail "./llmmerge is not built (make)"
train() { # name max_steps seed lr=LR [init_from] (without shuffle the seed does not change the data)
    write_tiny_nml $TEST_DIR/$1.nml name=$1 max_steps=$2 val_every=0 warmup=2 $4 init_from=${5:-}
    sed -i "s/seed = 1337/seed = $3/" $TEST_DIR/$1.nml
    $MPIRUN -np 1 ./llmtrain $TEST_DIR/$1.nml >$TEST_DIR/$1.log 2>&1 || { tail $TEST_DIR/$1.log; fail "training $1 failed"; }
}
train base 30 1337 lr=3e-3
train fta 15 11 lr=2e-3 $TEST_DIR/base/weights_step000030.h5
train ftb 15 12 lr=5e-3 $TEST_DIR/base/weights_step000030.h5

TEST_DIR=$TEST_DIR MPIRUN="$MPIRUN" $PYTHON - <<'EOF' || fail "llmmerge differs from the reference (numbers above)"
import os, subprocess, sys
import numpy as np
import merge_reference as mr

D, MPIRUN = os.environ["TEST_DIR"], os.environ["MPIRUN"].split()
print("reference:", mr.REFERENCE)
trained = {"base": D + "/base/weights_step000030.h5", "a": D + "/fta/weights_step000015.h5",
           "b": D + "/ftb/weights_step000015.h5"}
# random tensors in the tiny model's shapes: a base and three task vectors of it; in r2 one
# tensor is parallel to the base's (slerp's fallback)
rng = np.random.default_rng(2024)
shapes = {k: v.shape for k, v in mr.read_model(trained["base"]).items()}
r0 = {k: rng.normal(0, 0.02, s).astype(np.float32) for k, s in shapes.items()}
rnd = {"base": r0}
for i in (1, 2, 3):
    rnd["r%d" % i] = {k: (v + rng.normal(0, 0.01, v.shape)).astype(np.float32) for k, v in r0.items()}
rnd["r2"]["lnf.w"] = 2 * r0["lnf.w"]
paths = {}
for name, t in rnd.items():
    paths[name] = "%s/rand_%s.h5" % (D, name)
    mr.write_weights(paths[name], t, trained["base"])
models = {"trained": ({k: mr.read_model(p) for k, p in trained.items()}, trained),
          "random": (rnd, paths)}

def nml_value(v):
    if isinstance(v, bool): return ".true." if v else ".false."
    if isinstance(v, str): return "'%s'" % v
    if isinstance(v, (list, tuple)): return ", ".join(nml_value(x) for x in v)
    return repr(v)

# (set, method, models, base, keys, ranks)
cases = [
    ("trained", "linear", ["a", "b"], None, {"weights": [0.3, 0.7]}, 2),
    ("random", "linear", ["r1", "r2", "r3"], None, {"weights": [0.2, 0.3, 0.5], "normalize": False}, 3),
    ("trained", "slerp", ["a", "b"], None, {"t": 0.3, "t_filter": ["attn", "h.*.mlp.*"], "t_value": [0.2, 0.8]}, 2),
    ("random", "slerp", ["r2"], "base", {"t": 0.6}, 1),
    ("trained", "task_arithmetic", ["a", "b"], "base", {"weights": [0.5, 0.8], "lambda": 1.2}, 2),
    ("random", "task_arithmetic", ["r1", "r2", "r3"], "base", {"weights": [1.0, -0.5, 0.7], "normalize": True}, 1),
    ("trained", "ties", ["a", "b"], "base", {"weights": [1.0, 0.6], "density": 0.5}, 2),
    ("random", "ties", ["r1", "r2", "r3"], "base", {"weights": [0.4, 0.3, 0.3], "density": [0.2, 0.5, 1.0]}, 3),
    ("trained", "dare_linear", ["a", "b"], "base", {"weights": [0.5, 0.5], "density": 0.6}, 2),
    ("random", "dare_linear", ["r1", "r2", "r3"], "base", {"density": 0.3, "rescale": "1/density", "seed": 7}, 1),
    ("trained", "dare_ties", ["a", "b"], "base", {"weights": [1.0, 0.6], "density": [0.7, 0.5], "seed": 42}, 2),
    ("random", "dare_ties", ["r1", "r2", "r3"], "base", {"density": 0.4, "rescale": "none", "normalize": True}, 3),
]
ok, rows = True, []
for n, (set_name, method, ms, base, keys, ranks) in enumerate(cases):
    tensors, files = models[set_name]
    out = "%s/case%02d_%s_%s.h5" % (D, n, set_name, method)
    text = "&merge\n  method = '%s'\n  models = %s\n" % (method, nml_value([files[m] for m in ms]))
    if base: text += "  base = '%s'\n" % files[base]
    text += "".join("  %s = %s\n" % (k, nml_value(v)) for k, v in keys.items()) + "  out = '%s'\n/\n" % out
    nml = out[:-3] + ".nml"
    open(nml, "w").write(text)
    r = subprocess.run(MPIRUN + ["-np", str(ranks), "./llmmerge", nml], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr); print("FAIL: llmmerge exit %d on %s" % (r.returncode, nml)); ok = False; continue
    if method == "slerp":
        print("   ", [l for l in r.stdout.splitlines() if "fell back" in l][0])
        fell = int(r.stdout.split("lerp (|dot| > 0.9995) in ")[1].split()[0])
        if set_name == "random" and fell < 1: print("FAIL: no lerp fallback on the parallel tensor"); ok = False
    got = mr.read_model(out)
    args = dict(base=tensors[base] if base else None, weights=keys.get("weights"),
                density=keys.get("density") if isinstance(keys.get("density"), list) else
                ([keys["density"]] if "density" in keys else None),
                t=keys.get("t", 0.5), t_filters=list(zip(keys.get("t_filter", []), keys.get("t_value", []))),
                normalize=keys.get("normalize"), rescale=keys.get("rescale", "l1"),
                lam=keys.get("lambda", 1.0), seed=keys.get("seed", 1337))
    want = mr.merge(method, [tensors[m] for m in ms], **args)
    ea, er = mr.errors(got, want)
    bad = [k for k in want if not np.all(np.abs(got[k].astype(np.float64) - want[k]) <=
                                        1e-5 * np.abs(want[k]) + 1e-6 * np.sqrt(np.mean(want[k].astype(np.float64) ** 2)) + 1e-30)]
    na, nr = mr.errors(mr.merge(method, [tensors[m] for m in ms], use_mergekit=False, **args), want)
    rows.append((method, set_name, ranks, ea, er, na, bad))
    ok &= not bad and set(got) == set(want)
print("%-16s %-8s %5s %12s %12s   %s" % ("method", "models", "ranks", "max abs err", "max rel err", "(numpy vs reference: abs, rel)"))
for method, s, ranks, ea, er, na, bad in rows:
    print("%-16s %-8s %5d %12.3g %12.3g   (%.2g)%s" % (method, s, ranks, ea, er, na, "  FAIL in " + ", ".join(bad[:4]) if bad else ""))
sys.exit(0 if ok else 1)
EOF

# the same merge on 1 and 3 ranks: the same bytes (DARE's masks do not depend on the ranks)
nml=$(ls $TEST_DIR/case*_trained_dare_ties.nml)
out=${nml%.nml}.h5
mv $out $TEST_DIR/one.h5
$MPIRUN -np 1 ./llmmerge $nml >/dev/null || fail "dare_ties on 1 rank failed"
mv $out $TEST_DIR/one.h5
$MPIRUN -np 3 ./llmmerge $nml >/dev/null || fail "dare_ties on 3 ranks failed"
cmp $out $TEST_DIR/one.h5 || fail "1 and 3 ranks wrote different files"
echo "dare_ties on 1 and 3 ranks: identical files"

# a merged model loads in llmtrain and evaluates
ties=$(ls $TEST_DIR/case*_trained_ties.h5)
write_tiny_nml $TEST_DIR/eval.nml name=eval mode=eval dp=2 init_from=$ties
$MPIRUN -np 2 ./llmtrain $TEST_DIR/eval.nml >$TEST_DIR/eval.log 2>&1 || { tail $TEST_DIR/eval.log; fail "llmtrain could not evaluate $ties"; }
grep '^eval: val_loss' $TEST_DIR/eval.log
