#!/usr/bin/env python3
"""config_fuzz.py — an invariant fuzzer over llmtrain's configuration space.

It draws VALID configurations of tiny models (2-4 layers, d_model 32-64, seq_len 16-32, 4-6
steps) over the architecture (GPT-2 / Llama: GQA, RoPE, SwiGLU), dense and MoE blocks (top-k,
capacity or dropless, shared experts, routers), the grid (dp, tp, pp, ep up to 8 ranks, most at
<= 4), the pipeline schedules, ZeRO 0-3, recompute, precision (fp32 / bf16 / fp16 with loss
scaling, 16-bit weights and activations storage, bf16 products native or emulated), dropout,
label smoothing, z-loss, gradient accumulation, &stage curricula, data mixtures, validation,
anomaly policies and the checkpoint cadence, the data's shard version (llm.c's 1: uint16 ids, or
2: uint32, data/tiny_v2 written at start), and checks for each draw:

  I1 grid invariance: the same configuration on 1 rank (dp = tp = pp = ep = 1, schedule 1f1b,
     ZeRO 0, the same micro-batch and global batch) gives the same per-step loss and gradient
     norm, and the same validation losses (metrics.jsonl "loss", "grad_norm", "val_loss"),
     within TOL below: fp32 rel 1e-5; bf16 rel 2e-2 and fp16 rel 1e-2 (the grids differ in the
     order of fp32 sums, and a value on either side of a 16-bit rounding boundary moves by one
     16-bit ulp, 2^-8 resp. 2^-11 relative, in the layers after it).
  I2 resume invariance: the run (checkpoint every k steps) resumed in a new run directory from
     one of its checkpoints (&checkpoint resume = '<path>'), or a second copy of it stopped by
     SIGUSR1 after some step (exit 75) and continued with resume = 'auto', reproduces the
     uninterrupted run's step records (loss, lr, grad_norm) and validation losses bit for bit
     (the same text in metrics.jsonl), on the same grid.
  I3 liveness and honesty: every run ends within a bound from its size (`timeout`, and the
     watchdog's &checkpoint timeout_s = 30 inside it) with exit 0 (75 where SIGUSR1 stopped it).
     Exit 2 (a refusal) must come with exactly one 'llmtrain: error' line; a refusal of a draw
     the fuzzer built as valid is a FUZZER bug (its message printed), not a product failure;
     exit 3 / 4 / a signal / the timeout is a product failure.
  I4 consistency: &run mode = 'eval' with init_from = the final weights file gives the
     validation loss the run logged at its last step (eval prints 6 decimals: |diff| <= 1e-6).
  I5 generation: &run mode = 'generate' with init_from = the final weights file and a drawn
     prompt_ids / max_new_tokens / temperature / top_k, on the draw's grid: with pp = 1 it ends
     within the bound with exit 0 and prints max_new_tokens ids inside the vocabulary
     ("generate: continuation: ..."); with pp > 1 it is refused as llmtrain promises
     (docs/running.md: generation runs with pp = 1): exit 2, exactly one 'llmtrain: error' line,
     naming &parallel pp. A pipeline draw takes, drawn, that refusal or generation on its dp x tp
     with pp = 1 from the weights its pipeline saved (the pp = 1 promise).
  Products (with I3, honesty): a bf16 draw's startup line "precision: bf16 products ..." says
     what &train bf16_products asked: 'emulated' emulates; 'native' runs on the CPU's bf16
     instructions, or says it emulates because this CPU (or another rank's) has none. With
     LLMT_CPU_NO_BF16=1 in the fuzzer's environment every rank answers as a CPU without native
     bf16 products would (the test hook of validation/e2e/mixed_cpus_agree.sh), so the 'native'
     draws take that path. Both sides of I1 run the same products: the I1 tolerance is bf16's.

Which configurations: every key of `llmtrain --keys` (the schema, config.c's table) is either
drawn by the feature logic below (DRAWN), set by the harness (HARNESS), kept at its default for
the reason given in KEEP_DEFAULT, or - a key this file does not know yet - drawn generically from
its type, range and choices (printed at start as "generic keys: ..."), so a new key is fuzzed
without an edit here.

Modes:
  config_fuzz.py --seconds N [--seed S]    random draws for N seconds (seed printed; FUZZ_SEED)
  config_fuzz.py --covering                 the fixed pairwise covering set (deterministic), then
                                            the corpus (validation/fuzz/config_corpus/*.nml)
  config_fuzz.py --replay FILE.nml ...      the given corpus entries
  config_fuzz.py --list-covering            print the covering set, run nothing
Options: --bin PATH (or LLMTRAIN_BIN: the llmtrain to test, e.g. an older build), --work DIR,
--save (failing draws go to the corpus: on by default in random mode), --max-ranks N.
Exit status: 0 no failure; 1 a product failure (each printed as a complete namelist, the command
lines and the invariant with its numbers); 3 only fuzzer bugs (invalid draws).
Python 3 (standard library); reuses the tools' namelist reader and writer (src/tools/nml.py).
"""
import argparse
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "src", "tools"))
import nml  # noqa: E402  (the namelist reader/writer: parse_namelist, format_value)

CORPUS = os.path.join(ROOT, "validation", "fuzz", "config_corpus")
KNOWN_FAILING = os.path.join(CORPUS, "KNOWN_FAILING")

# I1 tolerances (relative), by &train precision: see the header.
TOL = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 1e-2}
EVAL_ABS = 1e-6  # I4: eval prints the loss with 6 decimals
WATCHDOG_S = 30   # &checkpoint timeout_s of every run: a hang ends as exit 4 within this

# The tiny shards again as llm.c's version 2 (uint32 ids, the same tokens), written at start.
TINY_V2 = "data/tiny_v2"


def write_tiny_v2():
    """data/tiny_v2/*.bin: each data/tiny shard with version 2 in its header and its uint16 ids
    widened to uint32 (the standard library's array; both little-endian, as llm.c writes them)."""
    import array
    import glob
    import struct
    os.makedirs(os.path.join(ROOT, TINY_V2), exist_ok=True)
    for src in sorted(glob.glob(os.path.join(ROOT, "data", "tiny", "*.bin"))):
        raw = open(src, "rb").read()
        magic, version, count = struct.unpack("<3i", raw[:12])
        if magic != 20240520 or version != 1:
            continue
        ids = array.array("H", raw[1024:1024 + 2 * count])
        wide = array.array("I", ids)
        assert wide.itemsize == 4 and sys.byteorder == "little"
        dst = os.path.join(ROOT, TINY_V2, os.path.basename(src))
        with open(dst + ".tmp", "wb") as f:
            f.write(struct.pack("<3i", magic, 2, count) + raw[12:1024] + wide.tobytes())
        os.replace(dst + ".tmp", dst)


# ---- the schema: which key is whose ---------------------------------------------------------

# Keys the feature logic (construct) draws.
DRAWN = {
    "run": "seed",
    "model": "n_layer n_head d_model d_ff vocab_size seq_len arch norm norm_eps pos rope_theta mlp "
             "rope_scaling rope_scaling_factor rope_low_freq_factor rope_high_freq_factor "
             "rope_original_max_positions sliding_window qkv_bias "
             "n_kv_head tie_embeddings bias dropout attn_dropout resid_dropout embd_dropout init "
             "init_std init_depth_scaled n_experts top_k moe_every d_ff_expert capacity_factor "
             "drop_policy router_noise aux_loss_coef z_loss_coef n_shared_experts router",
    "parallel": "dp cp tp pp ep schedule virtual_stages zero_stage zero3_resident recompute "
                "recompute_layers bucket_mb sequence_parallel",
    "train": "max_steps global_batch micro_batch lr min_lr warmup_steps lr_schedule decay_fraction "
             "weight_decay beta1 beta2 eps grad_clip label_smoothing z_loss precision offload "
             "bf16_products weights_storage activations_storage loss_scale initial_loss_scale "
             "loss_scale_window hysteresis min_loss_scale on_anomaly on_spike on_divergence "
             "anomaly_window spike_zscore grad_explosion_ratio divergence_evals overflow_streak "
             "max_rollbacks inject_nan_step inject_overflow_step",
    "data": "shuffle val_every val_batches mixture",
    "checkpoint": "every keep staging_mb async",
    "stage": "until_step seq_len global_batch lr min_lr warmup_steps lr_schedule",
}
# Keys the harness sets per run (names, paths, the mode of I4 and I5 and the prompt and sampling
# of I5, the resume of I2, the watchdog).
HARNESS = {
    "run": "name out_dir mode init_from prompt_ids max_new_tokens temperature top_k",
    "data": "train_files val_files",
    "checkpoint": "resume timeout_s",
    "log": "every",
}
# Keys kept at their default, and why (review this table when a key is added to config.c).
KEEP_DEFAULT = {
    ("run", "device"): "a CPU build refuses 'cuda'",
    ("run", "memory_limit_gb"): "the planner's limit: tiny models fit the node's",
    ("run", "time_limit_min"): "a deadline stop is timing-dependent (SIGUSR1 covers the stop path)",
    ("run", "prompt"): "a text prompt needs a tokenizer file (I5 draws prompt_ids)",
    ("model", "collapse_share"): "a warning threshold of the MoE log, no effect on the numbers",
    ("model", "collapse_steps"): "a warning threshold of the MoE log, no effect on the numbers",
    ("parallel", "bind"): "placement: 2 shared cores, oversubscribed",
    ("train", "allow_tf32"): "device = 'cuda' only",
    ("train", "inject_spike_step"): "the spike detector warms up again after a resume (docs/training.md "
                                    "Anomalies: detector statistics are not in checkpoints)",
    ("train", "dump_grads_step"): "a debugging dump, no effect on the run",
    ("data", "tokenizer"): "generation / llmprep only",
    ("data", "format"): "the tiny shards are llm.c's",
    ("checkpoint", "dir"): "the run directory (I2 reads the checkpoints there)",
    ("checkpoint", "io_timeout_s"): "I/O watchdog: the default is far above a tiny run",
    ("checkpoint", "overwrite"): "each run gets a fresh directory",
    ("checkpoint", "save_weights"): "I4 needs the final weights file",
    ("checkpoint", "striping_factor"): "Lustre hints",
    ("checkpoint", "striping_unit"): "Lustre hints",
    ("log", "jsonl"): "the invariants read metrics.jsonl",
    ("log", "tensorboard"): "a mirror of metrics.jsonl (tensorboard_roundtrip.sh)",
    ("log", "peak_flops"): "MFU reporting only",
    ("log", "papi_events"): "counters depend on the machine",
    ("log", "profile"): "timeline output only (trace_timeline.sh)",
    ("log", "profile_steps"): "needs profile",
    ("log", "carbon_intensity"): "reporting only",
    ("log", "straggler_ratio"): "reporting only (straggler.sh); 0 or above 1, which a generic draw is not",
    ("stage", "until_tokens"): "until_step is drawn (one kind for all stages)",
    ("stage", "train_files"): "the stages draw from &data's source",
    ("stage", "mixture"): "the stages draw from &data's source",
}


def split_table(t):
    return {(g, k) for g, keys in t.items() for k in keys.split()}


def load_schema(binary):
    """The key table of `binary --keys`; a build older than --keys: this tree's llmtrain's (said)."""
    out = subprocess.run([binary, "--keys"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        own = os.path.join(ROOT, "llmtrain")
        print("config_fuzz: %s has no --keys (exit %d): the key table of %s is used"
              % (binary, out.returncode, own))
        out = subprocess.run([own, "--keys"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            sys.exit("config_fuzz: %s --keys failed (exit %d): %s" % (own, out.returncode, out.stderr.strip()))
    return {(k["group"], k["name"]): k for k in json.loads(out.stdout)["keys"]}


def classify(schema):
    """(generic keys, keys of the tables that the schema lacks)."""
    known = split_table(DRAWN) | split_table(HARNESS) | set(KEEP_DEFAULT)
    generic = sorted(k for k in schema if k not in known)
    stale = sorted(k for k in known if k not in schema)
    return generic, stale


def draw_generic(rng, spec):
    """A value for a key this file does not know: from its choices, bool, or its range (small
    integers near the lower bound; reals inside the bounds). None: keep the default."""
    if spec.get("not_implemented") and not spec.get("choices"):
        return None
    t = spec["type"]
    if t == "string":
        return rng.choice(spec["choices"]) if spec.get("choices") else None
    if t == "bool":
        return rng.random() < 0.5
    if t in ("int", "int64"):
        lo = spec["min"] if spec["min"] is not None else spec["default"]
        lo = int(lo) + (0 if spec["min_inclusive"] else 1)
        hi = lo + 3
        if spec["max"] is not None:
            hi = min(hi, int(spec["max"]) - (0 if spec["max_inclusive"] else 1))
        return rng.randint(lo, max(lo, hi))
    if t == "real":
        d = float(spec["default"])
        lo = spec["min"] if spec["min"] is not None else d / 2
        hi = spec["max"] if spec["max"] is not None else (2 * d if d > 0 else 1.0)
        hi = min(hi, max(lo, 2 * d if d > 0 else 1.0))
        return round(lo + (hi - lo) * rng.uniform(0.05, 0.95), 6)
    return None


# ---- feature factors and their constraints -------------------------------------------------

FACTORS = {
    "arch": ["gpt2", "llama"],
    "moe": ["dense", "capacity", "dropless", "shared"],
    "dp": [1, 2],
    "tp": [1, 2],
    "cp": [1, 2],
    "pp": [1, 2],
    "ep": [1, 2],
    "schedule": ["1f1b", "gpipe", "interleaved", "zb-h1"],
    "zero": [0, 1, 2, 3],
    "recompute": ["none", "selective", "full"],
    "precision": ["fp32", "bf16", "fp16"],
    "products": ["auto/emulated", "native"],  # &train bf16_products of a bf16 run
    "storage16": ["auto", "weights", "activations", "both"],
    "dropout": ["off", "on"],
    "smoothing": ["off", "on"],
    "accum": [1, 2],
    "stages": ["none", "two"],
    "val": ["off", "on"],
    "anomaly": ["none", "nan_skip", "policies"],
    "offload": ["none", "optimizer"],
    "stop": ["path", "usr1"],
}
RANDOM_EXTRA = {"dp": [4], "pp": [4], "tp": [4], "ep": [4], "cp": [4]}  # random mode only (up to 8 ranks)


def valid_partial(a, max_ranks):
    """The constraints between factor values (a: a partial assignment). What makes a pair
    meaningful is a constraint too: a schedule other than 1F1B only with pp >= 2, ZeRO only with
    dp >= 2."""
    g = a.get
    if all(k in a for k in ("dp", "tp", "pp", "cp")) and a["dp"] * a["tp"] * a["pp"] * a["cp"] > max_ranks:
        return False
    if g("ep", 1) > 1:
        if "dp" in a and (a["dp"] < a["ep"] or a["dp"] % a["ep"]):
            return False
        if g("moe") == "dense":
            return False
    if g("schedule", "1f1b") != "1f1b" and g("pp", 2) < 2:
        return False
    if g("schedule") == "interleaved" and g("pp", 2) > 2:
        return False  # 4 layers = pp * virtual_stages
    if g("zero", 0) > 0 and g("dp", 2) < 2:
        return False
    if g("storage16", "auto") != "auto" and g("precision") == "fp32":
        return False
    if g("products") == "native" and g("precision", "bf16") != "bf16":
        return False  # a bf16 key
    if g("offload") == "optimizer" and g("schedule") == "zb-h1":
        return False  # refused: ZB-H1's post-validation keeps device copies of the state
    return True


def random_features(rng, max_ranks, fixed=None):
    for _ in range(10000):
        a = dict(fixed or {})
        for f, vals in FACTORS.items():
            if f in a:
                continue
            vals = vals + (RANDOM_EXTRA.get(f, []) if max_ranks > 4 else [])
            if f in ("dp", "tp", "pp", "ep", "cp"):  # most draws at <= 4 ranks (2 cores)
                w = [4 if v == 1 else 3 if v == 2 else 1 for v in vals]
                a[f] = rng.choices(vals, w)[0]
            else:
                a[f] = rng.choice(vals)
        if valid_partial(a, max_ranks):
            return a
    raise RuntimeError("no valid feature assignment")


def covering_set(max_ranks=4, seed=20240527, candidates=40):
    """A pairwise covering array of FACTORS under valid_partial, built greedily (AETG-like) with a
    fixed seed: every pair of values of two factors that some valid assignment holds is in at
    least one row. Deterministic: the same rows on every machine."""
    rng = random.Random(seed)
    names = list(FACTORS)
    pairs = set()
    for i, j in itertools.combinations(range(len(names)), 2):
        for vi in FACTORS[names[i]]:
            for vj in FACTORS[names[j]]:
                p = {names[i]: vi, names[j]: vj}
                if not valid_partial(p, max_ranks):
                    continue
                try:  # feasible: some complete valid assignment holds it
                    random_features(random.Random(1), max_ranks, p)
                except RuntimeError:
                    continue
                pairs.add(((names[i], vi), (names[j], vj)))

    def covered_by(a):
        return {((names[i], a[names[i]]), (names[j], a[names[j]]))
                for i, j in itertools.combinations(range(len(names)), 2)}

    rows = []
    while pairs:
        first = min(pairs, key=repr)
        best, best_n = None, -1
        for _ in range(candidates):
            a = {first[0][0]: first[0][1], first[1][0]: first[1][1]}
            order = [n for n in names if n not in a]
            rng.shuffle(order)
            for f in order:
                opts = []
                for v in FACTORS[f]:
                    b = dict(a, **{f: v})
                    if not valid_partial(b, max_ranks):
                        continue
                    gain = sum(1 for g2, v2 in a.items()
                               if (((f, v), (g2, v2)) if names.index(f) < names.index(g2)
                                   else ((g2, v2), (f, v))) in pairs)
                    opts.append((gain, rng.random(), v))
                if not opts:
                    break
                a[f] = max(opts)[2]
            if len(a) < len(names) or not valid_partial(a, max_ranks):
                continue
            n = len(covered_by(a) & pairs)
            if n > best_n:
                best, best_n = a, n
        if best is None:
            pairs.discard(first)  # cannot be completed (should not happen: feasibility above)
            continue
        rows.append(best)
        pairs -= covered_by(best)
    return rows


# ---- a draw: factors -> a complete namelist -------------------------------------------------

def values_text(v):
    """One value, or a list of them (an array key: prompt_ids), as the namelist reads them."""
    return ", ".join(nml.format_value(x) for x in v) if isinstance(v, list) else nml.format_value(v)


class Draw:
    def __init__(self, features, groups, stages, meta):
        self.features, self.groups, self.stages, self.meta = features, groups, stages, meta

    def get(self, group, key, default=None):
        return self.groups.get(group, {}).get(key, default)

    def ranks(self):
        return (self.get("parallel", "dp", 1) * self.get("parallel", "tp", 1) * self.get("parallel", "pp", 1)
                * self.get("parallel", "cp", 1))

    def namelist(self, overrides=None, header=""):
        """The namelist text; overrides {(group, key): value or None (removed)}."""
        groups = {g: dict(kv) for g, kv in self.groups.items()}
        for (g, k), v in (overrides or {}).items():
            groups.setdefault(g, {})
            if v is None:
                groups[g].pop(k, None)
            else:
                groups[g][k] = v
        lines = [header] if header else []
        for g in ("run", "model", "parallel", "train", "data", "checkpoint", "log"):
            if not groups.get(g):
                continue
            lines.append("&%s" % g)
            for k, v in groups[g].items():
                lines.append("  %-20s = %s" % (k, values_text(v)))
            lines.append("/")
        for st in self.stages:
            lines.append("&stage " + ", ".join("%s = %s" % (k, values_text(v)) for k, v in st.items()) + " /")
        return "\n".join(lines) + "\n"

    def ident(self):
        return hashlib.sha256(self.namelist().encode() + json.dumps(self.meta, sort_keys=True).encode()).hexdigest()[:10]


def construct(rng, f, schema, generic):
    """A complete valid configuration with the features f; the rest drawn from rng."""
    ch = rng.choice
    L = 4 if f["schedule"] == "interleaved" or f["pp"] == 4 else ch([2, 3, 4])
    d_model = ch([32, 48, 64])
    n_head = ch([2, 4]) if f["tp"] < 4 else 4
    m = {"n_layer": L, "n_head": n_head, "d_model": d_model, "vocab_size": ch([500, 500, 700]),
         "seq_len": ch([16, 24, 32]), "arch": f["arch"]}
    if rng.random() < 0.5:
        m["d_ff"] = ch([2, 4]) * d_model
    if f["arch"] == "llama":
        divs = [d for d in range(1, n_head + 1) if n_head % d == 0]
        m["n_kv_head"] = ch(divs)
        if rng.random() < 0.3:
            m["rope_theta"] = ch([500.0, 10000.0])
        if rng.random() < 0.3:
            m["norm_eps"] = 1e-6
    for key, vals in (("norm", ["layernorm", "rmsnorm"]), ("pos", ["learned", "rope"]),
                      ("mlp", ["gelu", "swiglu"]), ("tie_embeddings", [True, False]), ("bias", [True, False])):
        if rng.random() < 0.2:  # a switch against the arch's default
            m[key] = ch(vals)
    if m.get("pos", "rope" if f["arch"] == "llama" else "learned") == "rope" and rng.random() < 0.3:
        m["rope_scaling"] = "llama3"  # Llama 3.1's frequencies; all three bands at these sizes
        m["rope_scaling_factor"] = ch([2.0, 8.0])
        m["rope_low_freq_factor"], m["rope_high_freq_factor"] = ch([(1.0, 4.0), (0.5, 2.0)])
        m["rope_original_max_positions"] = ch([16, 64])
    if rng.random() < 0.2:  # Qwen 2's q/k/v biases (with bias = .false. the only biases)
        m["qkv_bias"] = True
    if rng.random() < 0.2:  # Mistral's window
        m["sliding_window"] = ch([m["seq_len"], 4096])
    if rng.random() < 0.3:
        m["init"] = ch(["gpt2", "xavier", "kaiming", "small"])
        m["init_depth_scaled"] = ch(["none", "total", "layer"])
        m["init_std"] = ch([0.02, 0.05])
    if f["dropout"] == "on":
        m["dropout"] = ch([0.1, 0.2])
        if rng.random() < 0.4:
            m[ch(["attn_dropout", "resid_dropout", "embd_dropout"])] = ch([0.0, 0.3])
    if f["moe"] != "dense":
        n_exp = ch([2, 4]) if f["ep"] <= 2 else 4
        m["n_experts"] = n_exp
        m["top_k"] = ch([k for k in (1, 2) if k <= n_exp])
        m["moe_every"] = ch([1, 2])
        if rng.random() < 0.5:
            m["d_ff_expert"] = ch([32, 64])
        m["capacity_factor"] = 0.0 if f["moe"] == "dropless" else ch([1.0, 1.25, 2.0])
        m["drop_policy"] = ch(["probs", "position"])
        if f["moe"] == "shared":
            m["n_shared_experts"] = ch([1, 2])
        m["router"] = ch(["linear", "linear", "mlp"])
        if rng.random() < 0.3:
            m["router_noise"] = ch([0.1, 1.0])
        m["aux_loss_coef"] = ch([0.0, 0.01, 0.1])
        m["z_loss_coef"] = ch([0.0, 0.001])
    p = {"dp": f["dp"], "tp": f["tp"], "pp": f["pp"]}
    if f.get("cp", 1) > 1:
        p["cp"] = f["cp"]  # every drawn seq_len (16, 24, 32) / 2 divides by cp (2, 4), / cp by tp
    if f["ep"] > 1:
        p["ep"] = f["ep"]
    if f["schedule"] != "1f1b" or rng.random() < 0.3:
        p["schedule"] = f["schedule"]
    if f["schedule"] == "interleaved":
        p["virtual_stages"] = L // f["pp"]
    if f["zero"]:
        p["zero_stage"] = f["zero"]
        if f["zero"] == 3 and rng.random() < 0.4:
            p["zero3_resident"] = True
    if f["tp"] > 1 and rng.random() < 0.5:
        p["sequence_parallel"] = True  # every drawn seq_len (and stage seq_len) divides by tp
    if f["recompute"] != "none":
        p["recompute"] = f["recompute"]
        if rng.random() < 0.4:
            p["recompute_layers"] = 1
    if rng.random() < 0.3:
        p["bucket_mb"] = 0.01  # several buckets

    steps = ch([4, 5, 6])
    mb = ch([1, 2])
    n_micro = f["accum"] * (f["pp"] if f["schedule"] == "interleaved" else 1)
    gb = mb * f["dp"] * n_micro
    lr = ch([1e-3, 3e-3])
    t = {"max_steps": steps, "micro_batch": mb, "global_batch": gb, "lr": lr,
         "min_lr": ch([0.0, lr / 10]), "warmup_steps": ch([0, 1, 2]),
         "lr_schedule": ch(["cosine", "constant", "linear", "wsd"]), "precision": f["precision"]}
    if t["lr_schedule"] == "wsd":
        t["decay_fraction"] = ch([0.2, 0.5])
    if rng.random() < 0.3:
        t.update(weight_decay=ch([0.0, 0.1]), beta1=ch([0.9, 0.8]), beta2=ch([0.95, 0.999]), eps=1e-8)
    t["grad_clip"] = ch([1.0, 1.0, 0.5, 0.0])
    if f["smoothing"] == "on":
        t["label_smoothing"] = ch([0.1, 0.2])
    if rng.random() < 0.25:
        t["z_loss"] = 1e-3
    if f["offload"] == "optimizer":
        t["offload"] = "optimizer"
    if f["precision"] == "bf16":  # 'auto' (not given): native where bf16 products are faster here
        if f["products"] == "native":
            t["bf16_products"] = "native"  # emulated, and said so, on a CPU without them
        elif rng.random() < 0.5:
            t["bf16_products"] = "emulated"
    if f["precision"] != "fp32":
        t["weights_storage"] = "16bit" if f["storage16"] in ("weights", "both") else ch(["auto", "fp32"])
        t["activations_storage"] = "16bit" if f["storage16"] in ("activations", "both") else ch(["auto", "fp32"])
    if f["precision"] == "fp16":
        if rng.random() < 0.3:
            t["loss_scale"] = ch([128.0, 1024.0])
        else:
            t["initial_loss_scale"] = ch([65536.0, 1024.0])
            t["loss_scale_window"] = ch([2, 1000])
            t["hysteresis"] = ch([1, 2])
            t["min_loss_scale"] = 1.0
            if rng.random() < 0.3:
                t["inject_overflow_step"] = rng.randint(1, steps - 2)
    if f["anomaly"] == "nan_skip":
        t["on_anomaly"] = "skip"
        t["inject_nan_step"] = rng.randint(1, steps - 2)
    elif f["anomaly"] == "policies":
        t["on_anomaly"] = ch(["warn", "skip", "rollback"])
        t["on_spike"] = ch(["", "warn", "skip", "rollback"])
        t["on_divergence"] = ch(["", "warn", "skip"])
        t["anomaly_window"] = ch([20, 50])  # no verdict before this many steps (a tiny run has fewer)
        t["spike_zscore"] = ch([6.0, 8.0])
        t["grad_explosion_ratio"] = ch([10.0, 20.0])
        t["divergence_evals"] = ch([5, 10])
        t["max_rollbacks"] = ch([1, 3])
        if f["precision"] == "fp16":
            t["overflow_streak"] = ch([0, 32])

    # llm.c's version-2 (uint32) shards, drawn from a side RNG keyed by the features and the next
    # value of rng (peeked from a copy), so that adding this draw changed no other draw
    peek = random.Random()
    peek.setstate(rng.getstate())
    side = random.Random("%s %r" % (json.dumps(f, sort_keys=True), peek.random()))
    tiny = TINY_V2 if side.random() < 0.25 else "data/tiny"
    d = {"train_files": tiny + "/train_*.bin"}
    if rng.random() < 0.2:  # the two shards as a mixture
        d = {"mixture": "%s/train_000.bin:0.7, %s/train_001.bin:0.3" % (tiny, tiny)}
    if rng.random() < 0.3:
        d["shuffle"] = True
    if f["val"] == "on":
        d["val_files"] = ("data/tiny" if side.random() < 0.5 else tiny) + "/val_*.bin"
        d["val_every"] = ch([e for e in (2, 3) if steps % e == 0] or [2]) if rng.random() < 0.7 else ch([2, 3])
        d["val_batches"] = ch([1, 3, 5, 2])
    k = ch([e for e in (2, 3) if -(-steps // e) <= 3])
    c = {"every": k, "keep": 3}

    stages = []
    if f["stages"] == "two":
        b = rng.randint(1, steps - 1)
        s1 = {"until_step": b}
        # a stage's seq_len: / 2 divisible by cp, / cp by tp with sequence parallelism
        cp, tps = f.get("cp", 1), f["tp"] if p.get("sequence_parallel") else 1
        lens = [n for n in (8, m["seq_len"] // 2) if n % (2 * cp) == 0 and n % tps == 0 and n // cp % tps == 0]
        if rng.random() < 0.6 and lens:
            s1["seq_len"] = ch(lens)
        if rng.random() < 0.5:
            s1["global_batch"] = gb * ch([1, 2])
        s2 = {}
        if rng.random() < 0.5:
            s2["lr"] = lr / 2
            s2["lr_schedule"] = ch(["constant", "linear", "cosine"])
            s2["warmup_steps"] = ch([0, 1])
            s2["min_lr"] = 0.0
        stages = [s1, s2]

    groups = {"run": {"name": "r", "out_dir": "runs", "seed": rng.randint(1, 10 ** 6)}, "model": m,
              "parallel": p, "train": t, "data": d, "checkpoint": c, "log": {"every": 1}}
    drawn_generic = []
    for key in generic:
        g, name = key
        if g == "stage":
            continue
        v = draw_generic(rng, schema[key])
        if v is not None:
            groups.setdefault(g, {})[name] = v
            drawn_generic.append("%s.%s=%r" % (g, name, v))
    # drawn last, so that every other value of a row is what it was before this key existed:
    # sharded checkpoint I/O in pieces of a few rows (0.01 MiB: 2621 floats)
    if rng.random() < 0.5:
        c["staging_mb"] = ch([1, 0.01, 0.05])
    # periodic saves written in the background (the default) or synchronously: both ways, with
    # the same resume invariance (I2)
    c["async"] = rng.random() < 0.5
    meta = {"stop": f["stop"], "generic": drawn_generic}
    return Draw(f, groups, stages, meta)


# ---- corpus entries: a namelist with the fuzzer's line ------------------------------------

def draw_from_file(path):
    text = open(path).read()
    nl = nml.parse_namelist(path, text)
    groups, stages = {}, []
    for g in nl.groups:
        kv = {}
        for e in g.entries:
            vals = [v.value for v in e.values]
            kv[e.key] = vals[0] if len(vals) == 1 else vals
        if g.name == "stage":
            stages.append(kv)
        else:
            groups.setdefault(g.name, {}).update(kv)
    meta = {"stop": "path", "generic": []}
    mo = re.search(r"^! config_fuzz: (\{.*\})$", text, re.M)
    if mo:
        meta.update(json.loads(mo.group(1)))
    return Draw({}, groups, stages, meta)


# ---- running llmtrain ----------------------------------------------------------------------

class Ctx:
    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.work = os.path.abspath(args.work)
        self.mpirun = os.environ.get("MPIRUN", "mpirun --oversubscribe").split()
        self.verbose = args.verbose
        self.runs = []  # the runs of the current draw, in order (a failure prints them all)
        for k, v in (("OMP_NUM_THREADS", "1"), ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
                     ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"), ("OMPI_MCA_rmaps_base_oversubscribe", "1")):
            os.environ.setdefault(k, v)


class Result:
    def __init__(self, cmd, rc, out, secs, run_dir):
        self.cmd, self.rc, self.out, self.secs, self.run_dir = cmd, rc, out, secs, run_dir

    def errors(self):
        return [ln for ln in self.out.splitlines() if "llmtrain: error" in ln]


def time_bound(draw, ranks):
    """Seconds a run may take: startup plus the steps, generous for 2 shared cores."""
    return 60 + 6 * draw.get("train", "max_steps", 6) * max(ranks, 1)


def launch(ctx, draw, label, ranks, overrides, env=None, until_step=None, log=None):
    """Run llmtrain on `ranks` ranks with the draw's namelist and overrides, in the draw's work
    folder (run directory and namelist <label>, output <log or label>.log). until_step: send
    SIGUSR1 to the ranks once metrics.jsonl shows that step."""
    d = os.path.join(ctx.work, draw.ident())
    os.makedirs(d, exist_ok=True)
    ov = {("run", "name"): label, ("run", "out_dir"): d, ("checkpoint", "timeout_s"): float(WATCHDOG_S)}
    ov.update(overrides)
    nml = os.path.join(d, label + ".nml")
    with open(nml, "w") as fh:
        fh.write(draw.namelist(ov))
    cmd = ctx.mpirun + ["-np", str(ranks), ctx.bin, nml]
    run_dir = os.path.join(d, label)
    bound = time_bound(draw, ranks)
    e = dict(os.environ, **(env or {}))
    t0 = time.time()
    logf = open(os.path.join(d, (log or label) + ".log"), "w+")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=e, start_new_session=True)
    signalled = False
    rc = None
    while True:
        rc = proc.poll()
        if rc is not None:
            break
        if time.time() - t0 > bound:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
            break
        if until_step is not None and not signalled and has_step(run_dir, until_step):
            for pid in child_pids(proc.pid):
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            signalled = True
        time.sleep(0.05)
    logf.seek(0)
    out = logf.read()
    logf.close()
    show = " ".join(cmd)
    if env and "LLMT_FAULT" in env:
        show = "LLMT_FAULT=%s %s" % (env["LLMT_FAULT"], show)
    if until_step is not None:
        show += "   # SIGUSR1 to the ranks after step %d" % until_step
    res = Result(show, rc, out, time.time() - t0, run_dir)
    res.log = os.path.join(d, (log or label) + ".log")
    ctx.runs.append(res)
    if ctx.verbose:
        print("    %-10s rc=%s %.1fs" % (label, rc, res.secs), flush=True)
    return res


def child_pids(pid):
    """The llmtrain processes under mpirun (pid)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open("/proc/%s/cmdline" % p, "rb") as fh:
                argv0 = fh.read().split(b"\0")[0]
        except OSError:
            continue
        if int(fields[1]) == pid and argv0.endswith(b"llmtrain"):
            found.append(int(p))
    return found


def has_step(run_dir, step):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
            return ('"step":%d,"loss"' % step) in fh.read()
    except OSError:
        return False


def records(run_dir):
    """The step records {step: (loss, lr, grad_norm) as written} and validation losses {step: text}
    of a metrics.jsonl, superseded records left out."""
    steps, vals = {}, {}
    try:
        lines = open(os.path.join(run_dir, "metrics.jsonl")).read().splitlines()
    except OSError:
        return steps, vals
    for ln in lines:
        if ln.startswith('{"superseded":true'):
            continue
        mo = re.match(r'\{"step":(\d+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),', ln)
        if mo:
            steps[int(mo.group(1))] = mo.group(2, 3, 4)
            continue
        mo = re.match(r'\{"step":(\d+),"val_loss":([^,}]*)', ln)
        if mo:
            vals[int(mo.group(1))] = mo.group(2)
    return steps, vals


def num(s):
    try:
        return float(s)
    except ValueError:
        return float("nan")  # null (a non-finite value)


def rel(a, b):
    if a == b or (a != a and b != b):
        return 0.0
    return abs(a - b) / max(abs(b), 1e-30)


# ---- the invariants ------------------------------------------------------------------------

class Failure(Exception):
    def __init__(self, invariant, what, results, fuzzer_bug=False):
        super().__init__(what)
        self.invariant, self.what, self.results, self.fuzzer_bug = invariant, what, results, fuzzer_bug


def check_ended(res, want=(0,)):
    """I3 for one run."""
    if res.rc in want:
        return
    tail = "\n".join(res.out.splitlines()[-15:])
    if res.rc == 2:
        errs = res.errors()
        if len(errs) != 1:
            raise Failure("I3", "exit 2 with %d 'llmtrain: error' lines (want exactly 1):\n%s" % (len(errs), tail), [res])
        raise Failure("I3", "refused a draw built as valid: %s" % errs[0], [res], fuzzer_bug=True)
    if res.rc == "timeout":
        raise Failure("I3", "did not end within %d s (killed)\n%s" % (res.secs, tail), [res])
    raise Failure("I3", "exit %s (want %s)\n%s" % (res.rc, "/".join(map(str, want)), tail), [res])


def plan_ok(ctx, draw):
    d = os.path.join(ctx.work, draw.ident())
    os.makedirs(d, exist_ok=True)
    nml = os.path.join(d, "plan.nml")
    with open(nml, "w") as fh:
        fh.write(draw.namelist({("run", "out_dir"): d}))
    cmd = [ctx.bin, "--plan", nml]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    res = Result(" ".join(cmd), p.returncode, p.stdout + p.stderr, 0, d)
    ctx.runs.append(res)
    if p.returncode == 2:
        errs = res.errors()
        raise Failure("plan", "--plan refused it: %s" % (errs[0] if errs else res.out.splitlines()[-1:]), [res],
                      fuzzer_bug=True)
    check_ended(res)


def serial_overrides(draw):
    """The 1-rank reference of I1: the same model, data and batches, dp = tp = pp = ep = 1."""
    ov = {("parallel", k): v for k, v in (("dp", 1), ("tp", 1), ("pp", 1), ("cp", None))}
    ov.update({("parallel", "ep"): None, ("parallel", "schedule"): None, ("parallel", "virtual_stages"): None,
               ("parallel", "zero_stage"): None, ("parallel", "zero3_resident"): None,
               ("parallel", "sequence_parallel"): None})  # refused with tp = 1
    return ov


def grid_text_of(label):
    return label.split(" grid ", 1)[-1].split(" vs ")[0]


def compare_close(a, b, tol, label):
    """I1: the series of records a (grid) and b (serial) within tol; returns the worst errors."""
    sa, va = a
    sb, vb = b
    if sorted(sa) != sorted(sb) or not sa:
        return "step records: steps %s on the grid vs %s serial" % (sorted(sa), sorted(sb)), None
    worst = {"loss": (0, 0), "grad_norm": (0, 0), "val_loss": (0, 0)}
    for s in sa:
        for i, name in ((0, "loss"), (2, "grad_norm")):
            e = rel(num(sa[s][i]), num(sb[s][i]))
            if e > worst[name][0]:
                worst[name] = (e, s)
    if sorted(va) != sorted(vb):
        return "validation at steps %s on the grid vs %s serial" % (sorted(va), sorted(vb)), None
    for s in va:
        e = rel(num(va[s]), num(vb[s]))
        if e > worst["val_loss"][0]:
            worst["val_loss"] = (e, s)
    bad = [n for n, (e, _) in worst.items() if e > tol]
    if not va:
        del worst["val_loss"]
    text = "%s: " % grid_text_of(label) + ", ".join("%s worst rel.err %.1e%s" % (n, e, " (step %d)" % s if e else "")
                                                     for n, (e, s) in worst.items())
    if bad:
        lines = ["%s: %s (tol %g)" % (label, text, tol), "   step  grid loss / serial loss   grid norm / serial norm"]
        for s in sorted(sa):
            lines.append("   %4d  %s / %s   %s / %s" % (s, sa[s][0], sb[s][0], sa[s][2], sb[s][2]))
        for s in sorted(va):
            lines.append("   val %d  %s / %s" % (s, va[s], vb[s]))
        return "\n".join(lines), text
    return None, text


def compare_exact(full, part, from_step, label):
    """I2: the records of `part` from from_step on equal those of the uninterrupted run."""
    sf, vf = full
    sp, vp = part
    want = {s: r for s, r in sf.items() if s > from_step}
    got = {s: r for s, r in sp.items() if s > from_step}
    wantv = {s: v for s, v in vf.items() if s > from_step}
    gotv = {s: v for s, v in vp.items() if s > from_step}
    if want == got and wantv == gotv and want:
        return None
    lines = ["%s: the records after step %d differ from the uninterrupted run's (want bit-identical)" % (label, from_step),
             "   step  uninterrupted (loss, lr, grad_norm)  |  resumed"]
    for s in sorted(set(want) | set(got)):
        mark = "" if want.get(s) == got.get(s) else "   <--"
        lines.append("   %4d  %-36s |  %s%s" % (s, " ".join(want.get(s, ("-",))), " ".join(got.get(s, ("-",))), mark))
    for s in sorted(set(wantv) | set(gotv)):
        mark = "" if wantv.get(s) == gotv.get(s) else "   <--"
        lines.append("   val %d  %s  |  %s%s" % (s, wantv.get(s), gotv.get(s), mark))
    return "\n".join(lines)


def checkpoints(run_dir):
    out = []
    for fn in os.listdir(run_dir) if os.path.isdir(run_dir) else []:
        mo = re.match(r"ckpt_step(\d+)\.h5$", fn)
        if mo:
            out.append(int(mo.group(1)))
    return sorted(out)


def check_products(draw, res):
    """Products (with I3): a bf16 run's startup says the products &train bf16_products asked for,
    or why it emulates. Returns what it said, for the summary ('' for other precisions)."""
    if draw.get("train", "precision", "fp32") != "bf16":
        return ""
    asked = draw.get("train", "bf16_products", "auto")
    mo = re.search(r"^precision: bf16 products (native|emulated)(.*)$", res.out, re.M)
    if not mo:
        raise Failure("I3", "a bf16 run printed no 'precision: bf16 products' line", [res])
    used, why = mo.group(1), mo.group(2)
    none_here = "no native products" in why  # this CPU's, or another rank's: every rank emulates
    if (asked == "emulated" and used != "emulated") or (asked == "native" and used != "native" and not none_here):
        raise Failure("I3", "&train bf16_products = '%s', but the startup says: %s" % (asked, mo.group(0)), [res])
    return "bf16 products %s%s" % (used, " (asked 'native': none here)" if asked == "native" and none_here else
                                   " (asked '%s')" % asked)


def check_generate(ctx, draw, grid, ranks, steps_n, rng):
    """I5: mode = 'generate' on the final weights. On a pp = 1 grid, the draw's; on a pipeline
    grid, either the draw's (llmtrain's promise: a refusal) or the same dp x tp with pp = 1
    (weights saved on any grid load there), drawn. Returns the summary."""
    w = os.path.join(grid.run_dir, "weights_step%06d.h5" % steps_n)
    vocab = draw.get("model", "vocab_size", 50257)
    n_new = rng.choice([2, 4])
    prompt = [rng.randrange(vocab) for _ in range(rng.choice([1, 3]))]
    temp, top_k = rng.choice([(0.0, 0), (0.8, 0), (0.8, 20), (1.0, 5)])
    ov = {("run", "mode"): "generate", ("run", "init_from"): w, ("run", "prompt_ids"): prompt,
          ("run", "max_new_tokens"): n_new, ("run", "temperature"): temp, ("run", "top_k"): top_k,
          ("checkpoint", "every"): None,
          ("parallel", "sequence_parallel"): None,  # generation refuses it (prompts of any length)
          ("parallel", "cp"): None}  # ... and context parallelism: the same grid without cp
    ranks //= draw.get("parallel", "cp", 1)
    pp = draw.get("parallel", "pp", 1)
    on_pp1 = pp > 1 and rng.random() < 0.5
    if on_pp1:
        ov.update({("parallel", "pp"): 1, ("parallel", "schedule"): None, ("parallel", "virtual_stages"): None})
    gen = launch(ctx, draw, "generate", ranks // pp if on_pp1 else ranks, ov)
    if pp > 1 and not on_pp1:  # llmtrain's promise: generation runs with pp = 1, a refusal otherwise
        errs = gen.errors()
        if gen.rc != 2 or len(errs) != 1 or "&parallel pp" not in errs[0] or "pp = 1" not in errs[0]:
            raise Failure("I5", "mode = 'generate' on pp = %d: exit %s with %d error lines (want exit 2 and one "
                          "message naming &parallel pp):\n%s" % (pp, gen.rc, len(errs), "\n".join(gen.out.splitlines()[-10:])),
                          [grid, gen])
        return "generate on pp %d refused (exit 2, one message)" % pp
    check_ended(gen)
    mo = re.search(r"^generate: continuation:((?: -?\d+)*)\s*$", gen.out, re.M)
    ids = [int(x) for x in mo.group(1).split()] if mo else None
    if ids is None or len(ids) != n_new or not all(0 <= i < vocab for i in ids):
        raise Failure("I5", "mode = 'generate' (max_new_tokens = %d, vocab_size %d) printed %s"
                      % (n_new, vocab, mo.group(0) if mo else "no 'generate: continuation:' line"), [grid, gen])
    return "generate%s (temperature %g, top_k %d): %s -> %s" % (
        " on pp 1 from pp %d's weights" % pp if on_pp1 else "", temp, top_k, prompt, ids)


def check_draw(ctx, draw, rng):
    """Runs the invariants on one draw. Returns a list of (invariant, summary) passes; raises
    Failure on the first one broken."""
    shutil.rmtree(os.path.join(ctx.work, draw.ident()), ignore_errors=True)
    ctx.runs = []
    plan_ok(ctx, draw)
    ranks = draw.ranks()
    steps_n = draw.get("train", "max_steps")
    prec = draw.get("train", "precision", "fp32")
    done = []
    grid = launch(ctx, draw, "grid", ranks, {})
    check_ended(grid)
    full = records(grid.run_dir)
    if len(full[0]) != steps_n:
        raise Failure("I3", "the run ended with %d step records, want %d" % (len(full[0]), steps_n), [grid])
    products = check_products(draw, grid)
    if products:
        done.append(("products:", products))
    # I1
    if ranks > 1:
        ser = launch(ctx, draw, "serial", 1, serial_overrides(draw))
        check_ended(ser)
        err, text = compare_close(full, records(ser.run_dir), TOL[prec], "I1 grid %s vs 1 rank" % grid_text(draw))
        if err:
            raise Failure("I1", err, [grid, ser])
        done.append(("I1", text))
    # I2
    cks = [s for s in checkpoints(grid.run_dir) if s < steps_n]
    if draw.meta.get("stop") == "usr1":
        at = rng.randint(1, steps_n - 1)
        ov = {("checkpoint", "resume"): "auto"}
        env = {"LLMT_FAULT": "step@0:sleep300"}
        first = launch(ctx, draw, "usr1", ranks, ov, env=env, until_step=at)
        check_ended(first, want=(75, 0))
        stopped = max((s for s in records(first.run_dir)[0]), default=0) if first.rc == 75 else steps_n
        again = launch(ctx, draw, "usr1", ranks, ov, log="usr1-again")
        check_ended(again)
        err = compare_exact(full, records(again.run_dir), 0,
                            "I2 stopped by SIGUSR1 at step %d (exit %s), resumed with resume = 'auto'" % (stopped, first.rc))
        if err:
            raise Failure("I2", err, [grid, first, again])
        done.append(("I2", "SIGUSR1 at step %d, resume 'auto': %d step records bit-identical" % (stopped, steps_n)))
    elif cks:
        k = rng.choice(cks)
        path = os.path.join(grid.run_dir, "ckpt_step%08d.h5" % k)
        res = launch(ctx, draw, "resume", ranks, {("checkpoint", "resume"): path})
        check_ended(res)
        err = compare_exact(full, records(res.run_dir), k, "I2 resumed from %s" % path)
        if err:
            raise Failure("I2", err, [grid, res])
        done.append(("I2", "resumed from step %d: %d step records bit-identical" % (k, steps_n - k)))
    # I4
    vals = full[1]
    if steps_n in vals:
        w = os.path.join(grid.run_dir, "weights_step%06d.h5" % steps_n)
        ev = launch(ctx, draw, "eval", ranks, {("run", "mode"): "eval", ("run", "init_from"): w,
                                               ("checkpoint", "every"): None})
        check_ended(ev)
        mo = re.search(r"^eval: val_loss (\S+)", ev.out, re.M)
        if not mo:
            raise Failure("I4", "eval printed no 'eval: val_loss' line", [grid, ev])
        e = abs(float(mo.group(1)) - num(vals[steps_n]))
        if not e <= EVAL_ABS:
            raise Failure("I4", "eval of the final weights: val_loss %s, the run logged %s at step %d (|diff| %.2e > %g)"
                          % (mo.group(1), vals[steps_n], steps_n, e, EVAL_ABS), [grid, ev])
        done.append(("I4", "eval %s = logged %s" % (mo.group(1), vals[steps_n])))
    done.append(("I5", check_generate(ctx, draw, grid, ranks, steps_n, rng)))
    return done


def grid_text(draw):
    p = draw.groups["parallel"]
    s = "dp%d tp%d pp%d" % (p.get("dp", 1), p.get("tp", 1), p.get("pp", 1))
    if p.get("cp", 1) > 1:
        s += " cp%d" % p["cp"]
    if p.get("ep", 1) > 1:
        s += " ep%d" % p["ep"]
    return s


def summary(draw):
    f = draw.features
    if not f:
        return grid_text(draw)
    return " ".join("%s=%s" % (k, v) for k, v in f.items())


def report_failure(ctx, draw, fail, save):
    kind = "FUZZER BUG (an invalid draw)" if fail.fuzzer_bug else "FAILURE %s" % fail.invariant
    print("=" * 100)
    print("%s: draw %s" % (kind, draw.ident()))
    print(fail.what)
    print("--- namelist (complete; the harness sets run.name, out_dir, checkpoint.timeout_s, and resume /"
          " mode / init_from for I2 / I4)")
    print(draw.namelist(header="! config_fuzz: " + json.dumps({"stop": draw.meta.get("stop", "path")})))
    print("--- command lines")
    for r in ctx.runs or fail.results:
        print("   %s   -> exit %s, %.1f s (log %s)" % (r.cmd, r.rc, r.secs, getattr(r, "log", "-")))
    print("=" * 100, flush=True)
    if save and not fail.fuzzer_bug:
        os.makedirs(CORPUS, exist_ok=True)
        path = os.path.join(CORPUS, "%s-%s.nml" % (fail.invariant, draw.ident()))
        first = fail.what.splitlines()[0][:200]
        with open(path, "w") as fh:
            fh.write("! %s found by config_fuzz.py: %s\n" % (fail.invariant, first))
            fh.write(draw.namelist(header="! config_fuzz: " + json.dumps({"stop": draw.meta.get("stop", "path")})))
        print("saved to %s" % os.path.relpath(path, ROOT))


def run_one(ctx, draw, rng, save, n, label):
    t0 = time.time()
    try:
        done = check_draw(ctx, draw, rng)
    except Failure as f:
        report_failure(ctx, draw, f, save)
        return "bug" if f.fuzzer_bug else "fail"
    except subprocess.TimeoutExpired as e:
        print("draw %s: %s" % (draw.ident(), e))
        return "fail"
    print("ok   %-4s %s %4.1fs %s | %s" % (n, draw.ident(), time.time() - t0, label,
                                           "; ".join("%s %s" % d for d in done)), flush=True)
    if draw.meta.get("generic"):
        print("      generic keys drawn: %s" % " ".join(draw.meta["generic"]))
    shutil.rmtree(os.path.join(ctx.work, draw.ident()), ignore_errors=True)
    return "ok"


def known_failing():
    out = {}
    if os.path.exists(KNOWN_FAILING):
        for ln in open(KNOWN_FAILING):
            ln = ln.strip()
            if ln and not ln.startswith("#"):
                name, _, why = ln.partition(" ")
                out[name] = why.strip()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("LLMTRAIN_BIN", os.path.join(ROOT, "llmtrain")))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "config-fuzz"))
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--covering", action="store_true")
    ap.add_argument("--list-covering", action="store_true")
    ap.add_argument("--replay", nargs="*")
    ap.add_argument("--no-corpus", action="store_true", help="--covering: not the corpus")
    ap.add_argument("--save", action="store_true", help="--covering / --replay: save failures to the corpus")
    ap.add_argument("--no-save", action="store_true", help="random draws: do not save failures")
    ap.add_argument("--max-ranks", type=int, default=8)
    ap.add_argument("--max-draws", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.list_covering:
        rows = covering_set()
        for i, r in enumerate(rows):
            print("%2d %s" % (i, " ".join("%s=%s" % kv for kv in r.items())))
        print("%d rows" % len(rows))
        return 0
    ctx = Ctx(args)
    schema = load_schema(ctx.bin)
    generic, stale = classify(schema)
    print("config_fuzz: %s, %d keys; generic keys (not in the fuzzer's tables, drawn from type/range/choices): %s"
          % (ctx.bin, len(schema), " ".join("%s.%s" % k for k in generic) or "none"))
    if stale:
        print("config_fuzz: keys in the tables that this llmtrain lacks (ignored): %s" % " ".join("%s.%s" % k for k in stale))
    os.makedirs(ctx.work, exist_ok=True)
    write_tiny_v2()
    counts = {"ok": 0, "fail": 0, "bug": 0, "skip": 0}
    t0 = time.time()
    if args.covering or args.replay is not None:
        jobs = []
        if args.covering:
            rows = covering_set()
            print("covering set: %d rows (every pair of values of %d factors)" % (len(rows), len(FACTORS)))
            for i, f in enumerate(rows):
                rng = random.Random(1000 + i)
                jobs.append(("cover%02d" % i, construct(rng, f, schema, generic), random.Random(2000 + i)))
        files = args.replay if args.replay else []
        if args.covering and not args.no_corpus and not args.replay:
            files = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.endswith(".nml")) \
                if os.path.isdir(CORPUS) else []
        known = known_failing()
        for path in files:
            name = os.path.basename(path)
            if name in known:
                print("skip %s: known failing: %s" % (name, known[name]))
                counts["skip"] += 1
                continue
            jobs.append(("corpus " + name, draw_from_file(path), random.Random(name)))
        for i, (label, draw, rng) in enumerate(jobs):
            counts[run_one(ctx, draw, rng, args.save, i, label + " " + summary(draw))] += 1
    else:
        seed = args.seed if args.seed is not None else int(os.environ.get("FUZZ_SEED", 0) or time.time())
        print("config_fuzz: seed %d (reproduce with FUZZ_SEED=%d), %g s" % (seed, seed, args.seconds))
        rng = random.Random(seed)
        n = 0
        while time.time() - t0 < args.seconds and (not args.max_draws or n < args.max_draws):
            f = random_features(rng, args.max_ranks)
            draw = construct(rng, f, schema, generic)
            counts[run_one(ctx, draw, random.Random(rng.random()), not args.no_save, n, summary(draw))] += 1
            n += 1
    print("config_fuzz: %d passed, %d failed, %d fuzzer bugs, %d known failures skipped in %.0f s"
          % (counts["ok"], counts["fail"], counts["bug"], counts["skip"], time.time() - t0))
    return 1 if counts["fail"] else 3 if counts["bug"] else 0


if __name__ == "__main__":
    sys.exit(main())
