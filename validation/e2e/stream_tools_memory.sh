#!/usr/bin/env bash
# llmconvert and llmmerge stream tensor by tensor: peak resident memory (/usr/bin/time's maximum
# RSS, an outside measurement) of each is at most its fixed overhead (the same command on a tiny
# model, measured here) + K x the largest tensor of a wide model (GPT-2, 10 layers x d_model 512,
# 128 MiB of weights, largest tensor wte 8 MiB) -- K = 5 for llmconvert in both directions, 4
# for llmmerge's linear and slerp, 8 for its ties (it keeps six tensor buffers) -- and so below
# half the model, which a tool that held the model could not be. The outputs are the references':
#   HF -> h5: /model equal to the safetensors tensors (transposed, wte padded with zero rows), and
#             the checksums verified by llmmerge's C reader (checkpoint.c) on every input;
#   h5 -> HF: model.safetensors byte for byte the file safetensors' save_file wrote (the round trip);
#   llmmerge: linear, slerp and ties against validation/merge_reference.py's numpy merges, per
#             element |got - want| <= 1e-5 |want| + 1e-6 rms(want) (float32 rounding).
# Every peak is printed with its bound.
source "$(dirname "$0")/lib.bash"
export PYTHONPATH=.deps/python:validation
[ -x ./llmmerge ] && [ -x ./llmconvert ] || fail "./llmmerge or ./llmconvert is not built (make)"
[ -x /usr/bin/time ] || { echo "SKIP: needs /usr/bin/time (Debian: time)"; exit 77; }
D=$TEST_DIR

# make_hf DIR SEED N_LAYER D_MODEL VOCAB: a random GPT-2 Hugging Face directory, written by save_file
make_hf() {
    $PYTHON - "$@" <<'EOF' || fail "making the model $1 failed"
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
d, seed, L, C, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
F, T, H = 4 * C, 64, 8
rng = np.random.default_rng(seed)
r = lambda *s: rng.standard_normal(s, dtype=np.float32) * 0.02
t = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(T, C),
     "transformer.ln_f.weight": r(C), "transformer.ln_f.bias": r(C)}
for l in range(L):
    for n, s in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
                 ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                 ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, F)),
                 ("mlp.c_fc.bias", (F,)), ("mlp.c_proj.weight", (F, C)), ("mlp.c_proj.bias", (C,))):
        t["transformer.h.%d.%s" % (l, n)] = r(*s)
os.makedirs(d, exist_ok=True)
save_file(t, d + "/model.safetensors", metadata={"format": "pt"})
json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
           "n_embd": C, "n_layer": L, "n_head": H, "n_inner": F}, open(d + "/config.json", "w"))
EOF
}
# peak NAME CMD...: runs CMD under /usr/bin/time; its maximum RSS in KiB in $D/NAME.kib
peak() {
    local name=$1; shift
    /usr/bin/time -o "$D/$name.time" -f %M "$@" >"$D/$name.log" 2>&1 || { cat "$D/$name.log"; fail "$name: $* failed"; }
    tail -1 "$D/$name.time" >"$D/$name.kib"
}
merge_nml() { # FILE METHOD MODELS BASE EXTRA OUT
    printf "&merge\n  method = '%s'\n  models = %s\n%s%s  out = '%s'\n/\n" "$2" "$3" \
        "${4:+  base = '$4'\n}" "$5" "$6" | sed 's/\\n/\n/g' >"$1"
}
run_all() { # SIZE: the models, the conversions and the merges, measured
    local s=$1 m
    for m in a b c; do
        make_hf "$D/$s.hf$m" $((7 + ${#m} * $(printf %d "'$m"))) $2 $3 $4
        peak $s.import.$m ./llmconvert --to hdf5 "$D/$s.hf$m" "$D/$s.$m.h5"
    done
    peak $s.export ./llmconvert --to hf "$D/$s.a.h5" "$D/$s.hf_rt"
    merge_nml "$D/$s.linear.nml" linear "'$D/$s.b.h5', '$D/$s.c.h5'" "" "  weights = 0.3, 0.7\n" "$D/$s.linear.h5"
    merge_nml "$D/$s.slerp.nml" slerp "'$D/$s.b.h5'" "$D/$s.a.h5" "  t = 0.4\n" "$D/$s.slerp.h5"
    merge_nml "$D/$s.ties.nml" ties "'$D/$s.b.h5', '$D/$s.c.h5'" "$D/$s.a.h5" "  density = 0.5\n" "$D/$s.ties.h5"
    for m in linear slerp ties; do peak $s.$m $MPIRUN -np 1 ./llmmerge "$D/$s.$m.nml"; done
}
t0=$SECONDS
run_all tiny 1 64 256
run_all wide 10 512 4096
echo "models made, converted and merged in $((SECONDS - t0)) s"

D=$D $PYTHON - <<'EOF' || fail "see above"
import os, sys
import numpy as np
import h5py
from safetensors.numpy import load_file
import merge_reference as mr

D = os.environ["D"]
MiB = 1 << 20
ok = True
hf = load_file(D + "/wide.hfa/model.safetensors")
largest = max(x.nbytes for x in hf.values())
model = sum(x.nbytes for x in hf.values())
print("wide model: %.1f MiB of weights in %d tensors, the largest %.1f MiB" % (model / MiB, len(hf), largest / MiB))
K = {"import.a": 5, "import.b": 5, "import.c": 5, "export": 5, "linear": 4, "slerp": 4, "ties": 8}
print("%-10s %12s %12s %12s %8s" % ("step", "tiny (MiB)", "wide (MiB)", "bound (MiB)", "K"))
for step, k in K.items():
    tiny, wide = (int(open("%s/%s.%s.kib" % (D, s, step)).read()) * 1024 for s in ("tiny", "wide"))
    bound = min(tiny + k * largest, tiny + model / 2)
    bad = wide > bound
    ok &= not bad
    print("%-10s %12.1f %12.1f %12.1f %8d%s" % (step, tiny / MiB, wide / MiB, bound / MiB, k,
                                                 "  FAIL: above the bound" if bad else ""))

# HF -> h5: /model is the safetensors tensors in llmtrain's layout
with h5py.File(D + "/wide.a.h5", "r") as f:
    g = f["model"]
    for ours in g:
        x = g[ours][...]
        if ours in ("wte", "wpe") or ours.startswith("lnf"):
            theirs = {"wte": "wte.weight", "wpe": "wpe.weight", "lnf.w": "ln_f.weight", "lnf.b": "ln_f.bias"}[ours]
            want = hf["transformer." + theirs]
        else:
            l, rest = ours[2:].split(".", 1)
            names = {"ln1.w": "ln_1.weight", "ln1.b": "ln_1.bias", "attn.qkv.w": "attn.c_attn.weight",
                     "attn.qkv.b": "attn.c_attn.bias", "attn.proj.w": "attn.c_proj.weight",
                     "attn.proj.b": "attn.c_proj.bias", "ln2.w": "ln_2.weight", "ln2.b": "ln_2.bias",
                     "mlp.fc.w": "mlp.c_fc.weight", "mlp.fc.b": "mlp.c_fc.bias",
                     "mlp.proj.w": "mlp.c_proj.weight", "mlp.proj.b": "mlp.c_proj.bias"}
            want = hf["transformer.h.%s.%s" % (l, names[rest])]
            want = want.T if rest.endswith(".w") and not rest.startswith("ln") else want
        if ours == "wte":
            want = np.concatenate([want, np.zeros((-want.shape[0] % 128, want.shape[1]), np.float32)])
        if x.shape != want.shape or not np.array_equal(x, want):
            print("FAIL: /model/%s differs from the safetensors tensor" % ours); ok = False
    print("HF -> h5: %d datasets equal to the safetensors tensors" % len(g))

# llmmerge against the numpy reference
models = {m: mr.read_model("%s/wide.%s.h5" % (D, m)) for m in "abc"}
cases = {"linear": mr.merge("linear", [models["b"], models["c"]], weights=[0.3, 0.7], use_mergekit=False),
         "slerp": mr.merge("slerp", [models["b"]], base=models["a"], t=0.4, use_mergekit=False),
         "ties": mr.merge("ties", [models["b"], models["c"]], base=models["a"], density=[0.5], use_mergekit=False)}
for method, want in cases.items():
    got = mr.read_model("%s/wide.%s.h5" % (D, method))
    bad = [k for k in want if not np.all(np.abs(got[k].astype(np.float64) - want[k]) <= 1e-5 * np.abs(want[k]) +
                                         1e-6 * np.sqrt(np.mean(want[k].astype(np.float64) ** 2)) + 1e-30)]
    ea, er = mr.errors(got, want)
    print("llmmerge %-7s vs numpy: max abs err %.3g, max rel err %.3g%s" % (method, ea, er, "  FAIL in " + ", ".join(bad[:4]) if bad else ""))
    ok &= not bad and set(got) == set(want)
sys.exit(0 if ok else 1)
EOF
cmp "$D/wide.hfa/model.safetensors" "$D/wide.hf_rt/model.safetensors" ||
    fail "h5 -> HF: model.safetensors differs from the one save_file wrote"
echo "h5 -> HF: model.safetensors byte-identical to save_file's ($(stat -c %s "$D/wide.hf_rt/model.safetensors") bytes)"
echo PASS
