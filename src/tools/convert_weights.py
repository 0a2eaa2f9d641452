"""convert_weights — llmconvert's side of llmtrain: the constants and the one user-error path
(UserError, need), the model registry (llmtrain's parameter names and global shapes for GPT-2
and Llama configurations, and their Hugging Face names), tensor checksums, and llmtrain weights
files (HDF5 via h5py: read_hdf5, write_hdf5, with the &model namelist and provenance).
Uses: nml.py, numpy. Used by: convert_hf, convert_tokenizer, convert_onnx, llmconvert.
"""

import contextlib
import os
import re
import numpy as np

import nml  # llmtrain's namelist reader, beside this file

EXIT_USER = 2
CKPT_FORMAT, CKPT_FORMAT_VERSION = "llmtrain-checkpoint", 1
LN_EPS = 1e-5                  # llmtrain's layernorm epsilon (src/kernels/cpu/layernorm.c)
VOCAB_MAX = 2147483520         # &model vocab_size at most: its padded vocabulary is an int32
EOT_TEXT = "<|endoftext|>"
ONNX_OPSET = 17                # LayerNormalization is an ONNX op from opset 17 on


@contextlib.contextmanager
def replaced_when_done(path):
    """Yields path.tmp to write; it becomes path when the block completes and is removed when the
    block raises (a corrupt input, a full disk), so no half-written file is ever left at path."""
    tmp = path + ".tmp"
    try:
        yield tmp
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)


class UserError(Exception):
    """Bad input: printed once as 'llmconvert: <message>', exit code 2."""


def need(cond, msg):
    if not cond:
        raise UserError(msg)


# ------------------------------------------------------------------ the model in between
# A model is (cfg, tensors). cfg holds llmtrain's &model keys: the sizes (vocab_size, n_layer,
# n_head, n_kv_head, d_model, d_ff, seq_len) and the architecture switches (norm, norm_eps, pos,
# rope_theta, mlp, tie_embeddings, bias, qkv_bias, the rope_scaling keys, sliding_window;
# docs/model.md, "Llama-family options"). tensors maps
# llmtrain's parameter names to loaders: functions of no arguments that read the tensor and return
# it as a float32 array in llmtrain's global shape, except that wte and lm_head.w have vocab_size
# rows (no padding). A conversion loads, converts and writes one tensor at a time, so its memory
# is a few times the largest tensor, never the model (docs/llmconvert.md, "Memory").

GPT2_SWITCHES = {"norm": "layernorm", "pos": "learned", "mlp": "gelu", "tie_embeddings": True, "bias": True}
LLAMA_SWITCHES = {"norm": "rmsnorm", "pos": "rope", "mlp": "swiglu", "tie_embeddings": False, "bias": False}
SWITCH_DEFAULTS = {"norm_eps": 1e-5, "rope_theta": 10000.0}
# Llama 3.1's rope_scaling, Qwen 2's q/k/v biases, Mistral's window: &model keys, these defaults
ROPE_SCALING_DEFAULTS = {"rope_scaling": "none", "rope_scaling_factor": 8.0, "rope_low_freq_factor": 1.0,
                         "rope_high_freq_factor": 4.0, "rope_original_max_positions": 8192}
EXTRA_DEFAULTS = dict(ROPE_SCALING_DEFAULTS, qkv_bias=False, sliding_window=0)


def rope_inv_freq(cfg, hs):
    """RoPE's inverse frequencies theta^(-2i/hs) (float64, for the ONNX graph's angle tables); with
    rope_scaling = 'llama3' Llama 3.1's bands as src/kernels/rope_math.h states them: wavelength w
    = 2 pi / inv above L / low_freq_factor divided by factor, below L / high_freq_factor kept, and
    between (1 - s) inv / factor + s inv, s = (L / w - low) / (high - low), L the original length."""
    inv = cfg["rope_theta"] ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    if cfg.get("rope_scaling", "none") != "llama3":
        return inv
    L, factor = float(cfg["rope_original_max_positions"]), cfg["rope_scaling_factor"]
    lo, hi = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    wl = 2 * np.pi / inv
    s = (L / wl - lo) / (hi - lo)
    mid = (1 - s) * inv / factor + s * inv
    return np.where(wl < L / hi, inv, np.where(wl > L / lo, inv / factor, mid))


def padded_vocab(v):
    return (v + 127) // 128 * 128


def fused_qkv(cfg):
    """llmtrain keeps GPT-2's fused h.N.attn.qkv.w when there is no GQA and no rope."""
    return cfg["n_kv_head"] == cfg["n_head"] and cfg["pos"] == "learned"


def param_shapes(cfg):
    """llmtrain's registry (src/model/params.c): name -> global shape (wte, lm_head.w unpadded)."""
    C, F, V, H, KV = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"], cfg["n_head"], cfg["n_kv_head"]
    hs = C // H
    ln_b, bias = cfg["norm"] == "layernorm", cfg["bias"]
    s = {"wte": (V, C)}
    if cfg["pos"] == "learned":
        s["wpe"] = (cfg["seq_len"], C)

    def add(name, shape, has):
        if has:
            s[name] = shape
    for l in range(cfg["n_layer"]):
        p = "h.%d." % l
        add(p + "ln1.w", (C,), True)
        add(p + "ln1.b", (C,), ln_b)
        if fused_qkv(cfg):
            add(p + "attn.qkv.w", (3 * C, C), True)
            add(p + "attn.qkv.b", (3 * C,), bias or cfg.get("qkv_bias", False))
        else:
            for n, rows in (("q", H * hs), ("k", KV * hs), ("v", KV * hs)):
                add(p + "attn.%s.w" % n, (rows, C), True)
                add(p + "attn.%s.b" % n, (rows,), bias or cfg.get("qkv_bias", False))
        add(p + "attn.proj.w", (C, C), True)
        add(p + "attn.proj.b", (C,), bias)
        add(p + "ln2.w", (C,), True)
        add(p + "ln2.b", (C,), ln_b)
        ins = ("fc",) if cfg["mlp"] == "gelu" else ("gate", "up")
        for n in ins:
            add(p + "mlp.%s.w" % n, (F, C), True)
            add(p + "mlp.%s.b" % n, (F,), bias)
        add(p + "mlp.proj.w", (C, F), True)
        add(p + "mlp.proj.b", (C,), bias)
    add("lnf.w", (C,), True)
    add("lnf.b", (C,), ln_b)
    add("lm_head.w", (V, C), not cfg["tie_embeddings"])
    return s


def hf_family(cfg):
    """'gpt2' or 'llama' when the switches are exactly one Hugging Face architecture's."""
    sw = {k: cfg[k] for k in GPT2_SWITCHES}
    if sw == GPT2_SWITCHES and cfg["n_kv_head"] == cfg["n_head"]:
        return "gpt2"
    if dict(sw, tie_embeddings=False) == LLAMA_SWITCHES:
        return "llama"
    return None


def gpt2_names(n_layer):
    """llmtrain name -> (Hugging Face name, transposed): GPT-2's Conv1D stores [in, out]."""
    m = {"wte": ("transformer.wte.weight", False), "wpe": ("transformer.wpe.weight", False),
         "lnf.w": ("transformer.ln_f.weight", False), "lnf.b": ("transformer.ln_f.bias", False)}
    block = [("ln1.w", "ln_1.weight", False), ("ln1.b", "ln_1.bias", False),
             ("attn.qkv.w", "attn.c_attn.weight", True), ("attn.qkv.b", "attn.c_attn.bias", False),
             ("attn.proj.w", "attn.c_proj.weight", True), ("attn.proj.b", "attn.c_proj.bias", False),
             ("ln2.w", "ln_2.weight", False), ("ln2.b", "ln_2.bias", False),
             ("mlp.fc.w", "mlp.c_fc.weight", True), ("mlp.fc.b", "mlp.c_fc.bias", False),
             ("mlp.proj.w", "mlp.c_proj.weight", True), ("mlp.proj.b", "mlp.c_proj.bias", False)]
    for l in range(n_layer):
        for ours, theirs, t in block:
            m["h.%d.%s" % (l, ours)] = ("transformer.h.%d.%s" % (l, theirs), t)
    return m


def llama_names(cfg):
    """LlamaForCausalLM (and MistralForCausalLM, Qwen2ForCausalLM: the same names, Qwen 2 with
    q/k/v biases): [out, in] like llmtrain, and q_proj / k_proj rows already in the rotate-half
    order of llmtrain's rope (docs/model.md, "Llama-family options")."""
    m = {"wte": ("model.embed_tokens.weight", False), "lnf.w": ("model.norm.weight", False)}
    if not cfg["tie_embeddings"]:
        m["lm_head.w"] = ("lm_head.weight", False)
    block = [("ln1.w", "input_layernorm.weight"), ("attn.q.w", "self_attn.q_proj.weight"),
             ("attn.k.w", "self_attn.k_proj.weight"), ("attn.v.w", "self_attn.v_proj.weight"),
             ("attn.proj.w", "self_attn.o_proj.weight"), ("ln2.w", "post_attention_layernorm.weight"),
             ("mlp.gate.w", "mlp.gate_proj.weight"), ("mlp.up.w", "mlp.up_proj.weight"),
             ("mlp.proj.w", "mlp.down_proj.weight")]
    if cfg.get("qkv_bias"):
        block += [("attn.%s.b" % n, "self_attn.%s_proj.bias" % n) for n in "qkv"]
    for l in range(cfg["n_layer"]):
        for ours, theirs in block:
            m["h.%d.%s" % (l, ours)] = ("model.layers.%d.%s" % (l, theirs), False)
    return m


def hf_names(cfg, what):
    fam = hf_family(cfg)
    need(fam is not None, "%s: the &model switches (%s) are neither GPT2LMHeadModel's nor "
         "LlamaForCausalLM's, so there is no Hugging Face architecture to write (--to onnx works)" %
         (what, ", ".join("%s = %s" % (k, cfg[k]) for k in GPT2_SWITCHES)))
    return gpt2_names(cfg["n_layer"]) if fam == "gpt2" else llama_names(cfg)


# ------------------------------------------------------------------ llmtrain's HDF5 files

C1, C2, GOLD = np.uint64(0xbf58476d1ce4e5b9), np.uint64(0x94d049bb133111eb), np.uint64(0x9e3779b97f4a7c15)


def tensor_checksum(x, start=0):
    """ckpt_tensor_checksum of src/io/checkpoint.c: sum mod 2^64 over the row-major elements of
    mix64(index * golden ^ (bits << 17) ^ bits), mix64 being splitmix64's finaliser. x may be a
    piece of a tensor whose first element has index `start`: the checksums of the pieces add up
    (mod 2^64) to the tensor's. Worked in blocks of 2^20 elements (a few 8 MiB temporaries)."""
    bits_all = np.ascontiguousarray(x, dtype="<f4").reshape(-1).view("<u4")
    total = np.uint64(0)
    step = 1 << 20
    with np.errstate(over="ignore"):
        for lo in range(0, bits_all.size, step):
            b = bits_all[lo:lo + step].astype(np.uint64)
            z = np.arange(start + lo, start + lo + b.size, dtype=np.uint64)
            z *= GOLD
            z ^= b
            b <<= np.uint64(17)
            z ^= b
            z ^= z >> np.uint64(30)
            z *= C1
            z ^= z >> np.uint64(27)
            z *= C2
            z ^= z >> np.uint64(31)
            total += z.sum(dtype=np.uint64)
    return int(total)


def load_all(tensors):
    """name -> array of every tensor of a model whose tensors are loaders (read_hdf5, read_hf):
    for what needs the whole model at once (the ONNX graph)."""
    return {name: load() for name, load in tensors.items()}


def llmtrain_version():
    """The version of the llmtrain source tree beside this file (src/core/version.h), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "..", "core", "version.h"),):
        try:
            m = re.search(r'LLMT_VERSION "([^"]*)"', open(p).read())
            if m:
                return m.group(1)
        except OSError:
            pass
    return "unknown"


def expand_env(s):
    """${VAR:-default} and ${VAR} as llmtrain expands them in path keys."""
    def one(m):
        v = os.environ.get(m.group(1))
        return v if v else (m.group(3) or "")
    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", one, s)


def namelist_value(text, group, key):
    """A key's first value in the first &group of an effective-namelist text (the config a file
    carries), as written there (a string without its quotes), or None. Read by nml.py."""
    try:
        n = nml.parse_namelist("config", text)
    except nml.UserError as e:
        raise UserError("the effective namelist the file carries does not read: %s" % e)
    for g in n.groups:
        if g.name == group:
            for e in g.entries:
                if e.key == key:
                    v = e.values[0]
                    return v.value if v.kind == "string" else v.raw
            return None
    return None


def h5py_or_exit():
    try:
        import h5py
    except ImportError:
        raise UserError("h5py is not installed (Debian: python3-h5py)")
    return h5py


def read_hdf5(path):
    """An llmtrain weights or checkpoint file -> (cfg, tensors, config text): names and shapes
    checked here, each tensor's checksum when its loader reads it."""
    h5py = h5py_or_exit()
    need(os.path.isfile(path), "%s: no such file" % path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise UserError("%s: not an HDF5 file (%s)" % (path, e))
    with f:
        a = f.attrs
        fmt = a.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        need(fmt == CKPT_FORMAT, "%s: not an llmtrain checkpoint (attribute format is %r)" % (path, fmt))
        for k in ("vocab_size", "padded_vocab", "n_layer", "n_head", "d_model", "d_ff", "seq_len"):
            need(k in a, "%s: root attribute '%s' is missing" % (path, k))
        text = a.get("config", "")
        if not text and "config" in f:
            text = f["config"][()]
        text = text.decode() if isinstance(text, bytes) else str(text)
        cfg = {k: int(a[k]) for k in ("vocab_size", "n_layer", "n_head", "d_model", "d_ff", "seq_len")}
        cfg.update(switches_from_config_text(text, path))
        cfg["n_kv_head"] = cfg["n_kv_head"] or cfg["n_head"]
        experts = namelist_value(text, "model", "n_experts")
        need(not experts or int(experts) == 0, "%s: a Mixture-of-Experts model (&model n_experts = %s): "
             "llmconvert exports dense models only in this version (Hugging Face and ONNX have no "
             "llmtrain MoE layout yet)" % (path, experts))
        need(cfg["n_head"] % cfg["n_kv_head"] == 0, "%s: &model n_kv_head = %d does not divide "
             "n_head = %d" % (path, cfg["n_kv_head"], cfg["n_head"]))
        need("model" in f, "%s: has no /model group" % path)
        g = f["model"]
        shapes = param_shapes(cfg)
        Vp = int(a["padded_vocab"])
        for name in sorted(g.keys()):
            need(name in shapes, "%s: dataset /model/%s is not a parameter of the model its config "
                 "attribute describes" % (path, name))
        for name, shape in shapes.items():
            need(name in g, "%s: dataset /model/%s is missing" % (path, name))
            d = g[name]
            want = (Vp,) + shape[1:] if name in ("wte", "lm_head.w") else shape
            need(d.shape == want, "%s: dataset /model/%s has shape %s, the model expects %s" %
                 (path, name, list(d.shape), list(want)))
            need("checksum" in d.attrs, "%s: dataset /model/%s has no checksum attribute" % (path, name))
    tensors = {name: hdf5_loader(path, name, cfg["vocab_size"]) for name in shapes}
    return cfg, tensors, text


def hdf5_loader(path, name, vocab_size):
    """The loader of dataset /model/<name> (read_hdf5): the whole dataset read, its checksum
    verified, the padding rows of wte and lm_head.w dropped."""
    def load():
        h5py = h5py_or_exit()
        with h5py.File(path, "r") as f:
            d = f["model"][name]
            x = np.asarray(d[...], dtype=np.float32)
            need(int(d.attrs["checksum"]) == tensor_checksum(x),
                 "%s: dataset /model/%s fails its checksum (corrupt file)" % (path, name))
        return x[:vocab_size] if name in ("wte", "lm_head.w") else x
    return load


def logical(v):
    return v.strip().lower() in (".true.", "t", ".t.", "true")


def switches_from_config_text(text, path):
    """The architecture keys of a file's effective namelist (its `config`): arch's defaults,
    then each switch the text names (files written before the Llama options are GPT-2)."""
    arch = (namelist_value(text, "model", "arch") or "gpt2").lower()
    need(arch in ("gpt2", "llama"), "%s: &model arch = '%s': llmconvert knows 'gpt2' and 'llama'" % (path, arch))
    cfg = dict(GPT2_SWITCHES if arch == "gpt2" else LLAMA_SWITCHES, arch=arch, **SWITCH_DEFAULTS)
    cfg.update(EXTRA_DEFAULTS)
    for k in ("norm", "pos", "mlp"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = v.lower()
    for k in ("tie_embeddings", "bias", "qkv_bias"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = logical(v)
    for k in ("norm_eps", "rope_theta", "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = float(v.lower().replace("d", "e"))
    for k in ("rope_original_max_positions", "sliding_window"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = int(v)
    v = namelist_value(text, "model", "rope_scaling")
    if v:
        cfg["rope_scaling"] = v.lower()
    need(cfg["rope_scaling"] in ("none", "llama3"), "%s: &model rope_scaling = '%s': llmconvert knows "
         "'none' and 'llama3'" % (path, cfg["rope_scaling"]))
    nkv = namelist_value(text, "model", "n_kv_head")
    cfg["n_kv_head"] = int(nkv) if nkv and int(nkv) > 0 else None
    need(cfg["norm"] in ("layernorm", "rmsnorm") and cfg["pos"] in ("learned", "rope") and
         cfg["mlp"] in ("gelu", "swiglu"), "%s: &model norm = '%s', pos = '%s', mlp = '%s': not "
         "switches llmconvert knows" % (path, cfg["norm"], cfg["pos"], cfg["mlp"]))
    return cfg


def model_namelist(cfg, init_from):
    """The &model keys of the imported model (and &run init_from), for the user's namelist."""
    b = lambda v: ".true." if v else ".false."  # noqa: E731
    lines = ["&model"] + (["  arch = '%s'" % cfg["arch"]] if cfg["arch"] != "gpt2" else []) + [
             "  " + ", ".join("%s = %d" % (k, cfg[k]) for k in
                              ("n_layer", "n_head", "d_model", "d_ff", "vocab_size", "seq_len"))]
    if cfg["arch"] != "gpt2":
        lines.append("  norm = '%s', norm_eps = %r, pos = '%s', rope_theta = %r, mlp = '%s'" %
                     (cfg["norm"], cfg["norm_eps"], cfg["pos"], cfg["rope_theta"], cfg["mlp"]))
        lines.append("  n_kv_head = %d, tie_embeddings = %s, bias = %s" %
                     (cfg["n_kv_head"], b(cfg["tie_embeddings"]), b(cfg["bias"])))
        if cfg.get("qkv_bias"):
            lines.append("  qkv_bias = .true.")
        if cfg.get("rope_scaling", "none") != "none":
            lines.append("  rope_scaling = '%s', rope_scaling_factor = %r, rope_low_freq_factor = %r," %
                         (cfg["rope_scaling"], cfg["rope_scaling_factor"], cfg["rope_low_freq_factor"]))
            lines.append("  rope_high_freq_factor = %r, rope_original_max_positions = %d" %
                         (cfg["rope_high_freq_factor"], cfg["rope_original_max_positions"]))
        if cfg.get("sliding_window"):
            lines.append("  sliding_window = %d" % cfg["sliding_window"])
    lines += ["/", "&run", "  init_from = '%s'" % init_from, "/"]
    return "\n".join(lines) + "\n"


def write_hdf5(path, cfg, tensors, config_text, provenance):
    """A weights file as ckpt_write_weights writes it: /model/<name> float32 in global shapes
    (wte padded with zero rows to a multiple of 128) each with its checksum, root attributes.
    Tensor by tensor: each is loaded, written and let go before the next; a loader's error
    (a corrupt input) removes the half-written file."""
    h5py = h5py_or_exit()
    Vp = padded_vocab(cfg["vocab_size"])
    with replaced_when_done(path) as tmp, h5py.File(tmp, "w") as f:
        write_hdf5_attrs(f, cfg, Vp, config_text, provenance)
        g = f.create_group("model")
        for name, shape in param_shapes(cfg).items():
            x = np.ascontiguousarray(tensors[name](), dtype=np.float32)
            if name in ("wte", "lm_head.w"):  # zero rows below the vocabulary, not a padded copy
                d = g.create_dataset(name, shape=(Vp,) + x.shape[1:], dtype="<f4")
                d[:x.shape[0]] = x
                pad = np.zeros((Vp - x.shape[0],) + x.shape[1:], np.float32)
                if pad.size:
                    d[x.shape[0]:] = pad
                total = tensor_checksum(x) + tensor_checksum(pad, start=x.size)
                d.attrs.create("checksum", total % (1 << 64), dtype="<u8")
            else:
                d = g.create_dataset(name, data=x, dtype="<f4")
                d.attrs.create("checksum", tensor_checksum(x), dtype="<u8")
            del x


def write_hdf5_attrs(f, cfg, Vp, config_text, provenance):
    """The root attributes and /provenance of a weights file (write_hdf5)."""
    a = f.attrs
    a["format"] = CKPT_FORMAT
    a.create("format_version", CKPT_FORMAT_VERSION, dtype="<i4")
    a["llmtrain_version"] = llmtrain_version()
    a["kind"] = "weights"
    a.create("step", 0, dtype="<i8")
    a.create("seed", 0, dtype="<i8")
    a.create("vocab_size", cfg["vocab_size"], dtype="<i4")
    a.create("padded_vocab", Vp, dtype="<i4")
    for k in ("n_layer", "n_head", "d_model", "d_ff", "seq_len"):
        a.create(k, cfg[k], dtype="<i4")
    a["run_id"] = provenance["run_id"]
    a["config"] = config_text
    p = f.create_group("provenance")
    for k, v in provenance.items():
        p.attrs[k] = v
