#!/usr/bin/env python3
"""llmconvert — models in and out of llmtrain: Hugging Face checkpoints (config.json +
safetensors) to an llmtrain HDF5 weights file, llmtrain weights or checkpoints to Hugging Face,
and either of them to ONNX.

    llmconvert --to hdf5 HF_DIR OUT.h5   import: OUT.h5 (a weights file for &run init_from, on any
                                         grid), OUT.nml (the &model keys and init_from; also
                                         printed), OUT.tiktoken when HF_DIR has a byte-level BPE
                                         tokenizer (vocab.json + merges.txt or tokenizer.json)
    llmconvert --to hf IN.h5 OUT_DIR     export: config.json, model.safetensors,
                                         generation_config.json, and the run's tokenizer as
                                         vocab.json, merges.txt, tokenizer.json,
                                         tokenizer_config.json (from --tokenizer PATH, else the
                                         file's &data tokenizer when it exists)
    llmconvert --to onnx IN OUT.onnx     the inference graph (input_ids [batch, sequence] int64 ->
                                         logits [batch, sequence, vocab] float32), opset 17;
                                         IN is an llmtrain .h5 file or a Hugging Face directory

Architectures: GPT-2 (GPT2LMHeadModel <-> llmtrain's GPT) and Llama (LlamaForCausalLM <->
`&model arch = 'llama'`). Weights are fp32 in llmtrain's files; an fp16/bf16 Hugging Face
checkpoint is widened on import (exactly), export writes fp32.

Why Python and not C like the rest of llmtrain: this is file-format glue for the ecosystems that
define the formats. safetensors, config.json's semantics, tokenizer.json and ONNX's protobuf
schema are specified by Python libraries (safetensors, transformers, tokenizers, onnx), and the
tests check against those same libraries; in C each would be a hand-written reader of a moving
format. Nothing here is on the training path or performance-critical (one pass over the weights).
It needs numpy and h5py (Debian), safetensors for writing Hugging Face files and onnx for
--to onnx (PyPI, installed into .deps/python by validation/deps.sh; PYTHONPATH=.deps/python);
transformers and torch are never imported.

Why the ONNX graph is built node by node with onnx.helper rather than by torch.onnx.export of the
transformers model: it needs neither torch nor transformers at conversion time (an HPC login node
rarely has them, and Debian's torch 1.13 is older than what recent transformers supports), it
follows llmtrain's own tensors and switches (so any llmtrain model exports, also those no Hugging
Face class describes), the graph is small and readable (standard ops of opset 17, which TensorRT
parses), and it is an implementation independent of transformers, so the tests compare two.

Exit codes: 0 done; 2 bad input (one message naming the file and the field or tensor: an
unsupported Hugging Face feature, a missing file, a shape that does not match).
"""
import argparse
import base64
import datetime
import hashlib
import json
import math
import os
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nml  # noqa: E402  (llmtrain's namelist reader, beside this file)

EXIT_USER = 2
CKPT_FORMAT, CKPT_FORMAT_VERSION = "llmtrain-checkpoint", 1
LN_EPS = 1e-5                  # llmtrain's layernorm epsilon (src/kernels/cpu/layernorm.c)
VOCAB_MAX = 65536              # uint16 token shards
EOT_TEXT = "<|endoftext|>"
ONNX_OPSET = 17                # LayerNormalization is an ONNX op from opset 17 on


class UserError(Exception):
    """Bad input: printed once as 'llmconvert: <message>', exit code 2."""


def need(cond, msg):
    if not cond:
        raise UserError(msg)


# ------------------------------------------------------------------ the model in between
# A model is (cfg, tensors). cfg holds llmtrain's &model keys: the sizes (vocab_size, n_layer,
# n_head, n_kv_head, d_model, d_ff, seq_len) and the architecture switches (norm, norm_eps, pos,
# rope_theta, mlp, tie_embeddings, bias; docs/model.md, "Llama-family options"). tensors maps
# llmtrain's parameter names to float32 arrays in llmtrain's global shapes, except that wte and
# lm_head.w have vocab_size rows (no padding).

GPT2_SWITCHES = {"norm": "layernorm", "pos": "learned", "mlp": "gelu", "tie_embeddings": True, "bias": True}
LLAMA_SWITCHES = {"norm": "rmsnorm", "pos": "rope", "mlp": "swiglu", "tie_embeddings": False, "bias": False}
SWITCH_DEFAULTS = {"norm_eps": 1e-5, "rope_theta": 10000.0}


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
            add(p + "attn.qkv.b", (3 * C,), bias)
        else:
            for n, rows in (("q", H * hs), ("k", KV * hs), ("v", KV * hs)):
                add(p + "attn.%s.w" % n, (rows, C), True)
                add(p + "attn.%s.b" % n, (rows,), bias)
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
    """LlamaForCausalLM: [out, in] like llmtrain, and q_proj / k_proj rows already in the
    rotate-half order of llmtrain's rope (docs/model.md, "Llama-family options")."""
    m = {"wte": ("model.embed_tokens.weight", False), "lnf.w": ("model.norm.weight", False)}
    if not cfg["tie_embeddings"]:
        m["lm_head.w"] = ("lm_head.weight", False)
    block = [("ln1.w", "input_layernorm.weight"), ("attn.q.w", "self_attn.q_proj.weight"),
             ("attn.k.w", "self_attn.k_proj.weight"), ("attn.v.w", "self_attn.v_proj.weight"),
             ("attn.proj.w", "self_attn.o_proj.weight"), ("ln2.w", "post_attention_layernorm.weight"),
             ("mlp.gate.w", "mlp.gate_proj.weight"), ("mlp.up.w", "mlp.up_proj.weight"),
             ("mlp.proj.w", "mlp.down_proj.weight")]
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


def tensor_checksum(x):
    """ckpt_tensor_checksum of src/io/checkpoint.c: sum mod 2^64 over the row-major elements of
    mix64(index * golden ^ (bits << 17) ^ bits), mix64 being splitmix64's finaliser."""
    bits_all = np.ascontiguousarray(x, dtype="<f4").reshape(-1).view("<u4")
    total = np.uint64(0)
    step = 1 << 22
    with np.errstate(over="ignore"):
        for lo in range(0, bits_all.size, step):
            b = bits_all[lo:lo + step].astype(np.uint64)
            z = np.arange(lo, lo + b.size, dtype=np.uint64) * GOLD ^ (b << np.uint64(17)) ^ b
            z ^= z >> np.uint64(30)
            z *= C1
            z ^= z >> np.uint64(27)
            z *= C2
            z ^= z >> np.uint64(31)
            total += z.sum(dtype=np.uint64)
    return int(total)


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
    """An llmtrain weights or checkpoint file -> (cfg, tensors, config text); checksums checked."""
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
        tensors = {}
        for name in sorted(g.keys()):
            need(name in shapes, "%s: dataset /model/%s is not a parameter of the model its config "
                 "attribute describes" % (path, name))
        for name, shape in shapes.items():
            need(name in g, "%s: dataset /model/%s is missing" % (path, name))
            d = g[name]
            want = (Vp,) + shape[1:] if name in ("wte", "lm_head.w") else shape
            need(d.shape == want, "%s: dataset /model/%s has shape %s, the model expects %s" %
                 (path, name, list(d.shape), list(want)))
            x = np.asarray(d[...], dtype=np.float32)
            need("checksum" in d.attrs, "%s: dataset /model/%s has no checksum attribute" % (path, name))
            need(int(d.attrs["checksum"]) == tensor_checksum(x),
                 "%s: dataset /model/%s fails its checksum (corrupt file)" % (path, name))
            tensors[name] = x[:cfg["vocab_size"]] if name in ("wte", "lm_head.w") else x
    return cfg, tensors, text


def logical(v):
    return v.strip().lower() in (".true.", "t", ".t.", "true")


def switches_from_config_text(text, path):
    """The architecture keys of a file's effective namelist (its `config`): arch's defaults,
    then each switch the text names (files written before the Llama options are GPT-2)."""
    arch = (namelist_value(text, "model", "arch") or "gpt2").lower()
    need(arch in ("gpt2", "llama"), "%s: &model arch = '%s': llmconvert knows 'gpt2' and 'llama'" % (path, arch))
    cfg = dict(GPT2_SWITCHES if arch == "gpt2" else LLAMA_SWITCHES, arch=arch, **SWITCH_DEFAULTS)
    for k in ("norm", "pos", "mlp"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = v.lower()
    for k in ("tie_embeddings", "bias"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = logical(v)
    for k in ("norm_eps", "rope_theta"):
        v = namelist_value(text, "model", k)
        if v:
            cfg[k] = float(v.lower().replace("d", "e"))
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
    lines += ["/", "&run", "  init_from = '%s'" % init_from, "/"]
    return "\n".join(lines) + "\n"


def write_hdf5(path, cfg, tensors, config_text, provenance):
    """A weights file as ckpt_write_weights writes it: /model/<name> float32 in global shapes
    (wte padded with zero rows to a multiple of 128) each with its checksum, root attributes."""
    h5py = h5py_or_exit()
    Vp = padded_vocab(cfg["vocab_size"])
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
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
        g = f.create_group("model")
        for name, shape in param_shapes(cfg).items():
            x = np.ascontiguousarray(tensors[name], dtype=np.float32)
            if name in ("wte", "lm_head.w"):
                x = np.concatenate([x, np.zeros((Vp - x.shape[0], x.shape[1]), np.float32)])
            d = g.create_dataset(name, data=x, dtype="<f4")
            d.attrs.create("checksum", tensor_checksum(x), dtype="<u8")
    os.replace(tmp, path)


# ------------------------------------------------------------------ Hugging Face checkpoints

def read_json(path, what):
    need(os.path.isfile(path), "%s: no such file (%s)" % (path, what))
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        raise UserError("%s: not valid JSON (%s)" % (path, e))


def hf_config_to_cfg(hf, path):
    """config.json -> cfg; every feature llmtrain's model does not have is refused by name."""
    def field(name, default=None):
        return hf.get(name, default)

    def refuse(name, why):
        raise UserError("%s: field '%s' = %s: %s" % (path, name, json.dumps(hf.get(name)), why))

    mtype = field("model_type")
    if mtype == "gpt2":
        return gpt2_config(hf, field, refuse)
    if mtype == "llama":
        return llama_config(hf, field, refuse)
    refuse("model_type", "llmconvert imports 'gpt2' (GPT2LMHeadModel) and 'llama' (LlamaForCausalLM)")


def common_checks(cfg, field, refuse, vocab_key):
    if not 1 <= cfg["vocab_size"] <= VOCAB_MAX:
        refuse(vocab_key, "llmtrain's token shards hold at most %d ids" % VOCAB_MAX)
    if cfg["d_model"] % cfg["n_head"]:
        refuse("num_attention_heads" if cfg["arch"] == "llama" else "n_head",
               "does not divide the model width")
    if field("add_cross_attention", False):
        refuse("add_cross_attention", "llmtrain's model is a decoder without cross-attention")


def gpt2_config(hf, field, refuse):
    arch = field("architectures") or ["GPT2LMHeadModel"]
    if "GPT2LMHeadModel" not in arch:
        refuse("architectures", "only GPT2LMHeadModel (the language-model head) is imported")
    if field("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        refuse("activation_function", "llmtrain's MLP uses GELU with the tanh approximation "
               "('gelu_new')")
    if field("scale_attn_by_inverse_layer_idx", False):
        refuse("scale_attn_by_inverse_layer_idx", "llmtrain scales attention by 1/sqrt(head size) only")
    if not field("scale_attn_weights", True):
        refuse("scale_attn_weights", "llmtrain always scales attention by 1/sqrt(head size)")
    if abs(float(field("layer_norm_epsilon", 1e-5)) - LN_EPS) > 1e-12:
        refuse("layer_norm_epsilon", "llmtrain's layernorm uses eps = 1e-5")
    if not field("tie_word_embeddings", True):
        refuse("tie_word_embeddings", "llmtrain's GPT-2 ties the output head to wte")
    C = int(field("n_embd", 768))
    cfg = dict(GPT2_SWITCHES, **SWITCH_DEFAULTS)
    cfg.update({"arch": "gpt2", "vocab_size": int(field("vocab_size", 50257)), "n_layer": int(field("n_layer", 12)),
           "n_head": int(field("n_head", 12)), "d_model": C,
           "d_ff": int(field("n_inner") or 4 * C), "seq_len": int(field("n_positions", 1024))})
    cfg["n_kv_head"] = cfg["n_head"]
    common_checks(cfg, field, refuse, "vocab_size")
    return cfg


def llama_config(hf, field, refuse):
    arch = field("architectures") or ["LlamaForCausalLM"]
    if "LlamaForCausalLM" not in arch:
        refuse("architectures", "only LlamaForCausalLM (the language-model head) is imported")
    if field("hidden_act", "silu") != "silu":
        refuse("hidden_act", "llmtrain's SwiGLU uses SiLU")
    if field("rope_scaling") is not None:
        refuse("rope_scaling", "llmtrain's rotary embedding has no scaling (theta only)")
    if field("attention_bias", False):
        refuse("attention_bias", "llmtrain's Llama has no biases")
    if field("mlp_bias", False):
        refuse("mlp_bias", "llmtrain's Llama has no biases")
    if not float(field("rms_norm_eps", 1e-6)) > 0:
        refuse("rms_norm_eps", "must be positive")
    if int(field("pretraining_tp", 1)) != 1:
        refuse("pretraining_tp", "only 1 (the exact matrix products) is supported")
    H = int(field("num_attention_heads", 32))
    cfg = dict(LLAMA_SWITCHES)
    cfg.update({"arch": "llama", "vocab_size": int(field("vocab_size", 32000)),
           "n_layer": int(field("num_hidden_layers", 32)), "n_head": H,
           "n_kv_head": int(field("num_key_value_heads") or H),
           "d_model": int(field("hidden_size", 4096)), "d_ff": int(field("intermediate_size", 11008)),
           "seq_len": int(field("max_position_embeddings", 2048)),
           "rope_theta": float(field("rope_theta", 10000.0)), "norm_eps": float(field("rms_norm_eps", 1e-6)),
           "tie_embeddings": bool(field("tie_word_embeddings", False))})
    if H % cfg["n_kv_head"]:
        refuse("num_key_value_heads", "does not divide num_attention_heads")
    if (cfg["d_model"] // H) % 2:
        refuse("hidden_size", "the head size must be even for rotary embeddings")
    common_checks(cfg, field, refuse, "vocab_size")
    return cfg


def safetensors_files(d):
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        wm = read_json(index, "safetensors index")
        wm = wm.get("weight_map") if isinstance(wm, dict) else None
        need(isinstance(wm, dict) and wm, "%s: field 'weight_map' is missing or not an object of "
             "tensor name -> file" % index)
        root = os.path.realpath(d)
        files = []
        for name, f in wm.items():
            need(isinstance(f, str) and f and not os.path.isabs(f) and ".." not in f.replace("\\", "/").split("/")
                 and os.path.realpath(os.path.join(d, f)).startswith(root + os.sep),
                 "%s: field 'weight_map' names %r for tensor '%s': a file of the model directory "
                 "%s is expected (a relative name, no '..')" % (index, f, name, d))
            files.append(f)
        return [os.path.join(d, f) for f in sorted(set(files))]
    raise UserError("%s: no model.safetensors (nor model.safetensors.index.json); llmconvert "
                    "reads safetensors checkpoints (save_pretrained(..., safe_serialization=True))" % d)


SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                      "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """name -> array of a .safetensors file (8-byte header length, JSON header, data); BF16 is
    widened to float32 exactly (its bits are a float32's upper half), which numpy, and so
    safetensors.numpy, cannot hold."""
    with open(path, "rb") as f:
        head = f.read(8)
        need(len(head) == 8, "%s: not a safetensors file (shorter than its header)" % path)
        n = int.from_bytes(head, "little")
        need(n < (1 << 27), "%s: not a safetensors file (header of %d bytes)" % (path, n))
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise UserError("%s: not a safetensors file (header: %s)" % (path, e))
    need(isinstance(header, dict), "%s: not a safetensors file (its header is a JSON %s, not an "
         "object of tensor name -> {dtype, shape, data_offsets})" % (path, type(header).__name__))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        where = "%s: tensor '%s'" % (path, name)
        need(isinstance(h, dict), "%s: header entry is not an object" % where)
        offs, shape, dtype = h.get("data_offsets"), h.get("shape"), h.get("dtype")
        need(isinstance(offs, list) and len(offs) == 2 and all(type(v) is int for v in offs),
             "%s: field 'data_offsets' is %r, want [begin, end] (two integers)" % (where, offs))
        need(isinstance(shape, list) and all(type(v) is int and v >= 0 for v in shape),
             "%s: field 'shape' is %r, want a list of non-negative integers" % (where, shape))
        need(isinstance(dtype, str), "%s: field 'dtype' is %r, want a string such as \"F32\"" % (where, dtype))
        b, e = offs
        need(0 <= b <= e <= data.size, "%s lies outside the file (field 'data_offsets' %r; truncated?)" % (where, offs))
        raw = data[b:e]
        if dtype == "BF16":
            need((e - b) % 2 == 0, "%s: field 'data_offsets' spans %d bytes, not whole BF16 elements" % (where, e - b))
            x = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            need(dtype in SAFETENSORS_DTYPES, "%s: field 'dtype' is %s, which llmconvert does not read" % (where, dtype))
            size = np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize
            need((e - b) % size == 0, "%s: field 'data_offsets' spans %d bytes, not whole %s elements" % (where, e - b, dtype))
            x = raw.view(SAFETENSORS_DTYPES[dtype])
        need(x.size == int(np.prod(h["shape"])), "%s: tensor '%s' has %d elements, its shape %s says %d" %
             (path, name, x.size, h["shape"], int(np.prod(h["shape"]))))
        out[name] = np.array(x.reshape(h["shape"]))
    return out


def read_hf(d):
    """A Hugging Face directory -> (cfg, tensors, source files)."""
    need(os.path.isdir(d), "%s: no such directory (a Hugging Face checkpoint: config.json + "
         "model.safetensors)" % d)
    cpath = os.path.join(d, "config.json")
    cfg = hf_config_to_cfg(read_json(cpath, "the model's config.json"), cpath)
    raw = {}
    files = safetensors_files(d)
    for p in files:
        need(os.path.isfile(p), "%s: no such file (named by the safetensors index)" % p)
        raw.update(read_safetensors(p))
    prefix = "transformer." if hf_family(cfg) == "gpt2" else "model."
    if not any(k.startswith(prefix) for k in raw):  # saved from the bare GPT2Model / LlamaModel
        raw = {prefix + k: v for k, v in raw.items()}
    tensors = {}
    shapes = param_shapes(cfg)
    for ours, (theirs, transposed) in hf_names(cfg, d).items():
        need(theirs in raw, "%s: tensor '%s' is missing" % (d, theirs))
        x = raw.pop(theirs)
        need(np.issubdtype(x.dtype, np.floating), "%s: tensor '%s' has dtype %s" % (d, theirs, x.dtype))
        x = x.astype(np.float32).T if transposed else x.astype(np.float32)
        need(tuple(x.shape) == shapes[ours], "%s: tensor '%s' has shape %s, config.json implies %s" %
             (d, theirs, list(x.shape if not transposed else x.T.shape),
              list(shapes[ours] if not transposed else shapes[ours][::-1])))
        tensors[ours] = np.ascontiguousarray(x)
    head = raw.pop("lm_head.weight", None)
    if head is not None:
        need(np.array_equal(head.astype(np.float32), tensors["wte"]),
             "%s: tensor 'lm_head.weight' differs from the token embedding, but config.json ties "
             "them (tie_word_embeddings)" % d)
    for k in list(raw):  # GPT-2's causal-mask buffers, saved by older transformers versions
        if re.fullmatch(r"transformer\.h\.\d+\.attn\.(bias|masked_bias)", k) or k.endswith("rotary_emb.inv_freq"):
            raw.pop(k)
    need(not raw, "%s: tensor '%s' is not part of the model llmtrain builds" % (d, sorted(raw)[0] if raw else ""))
    return cfg, tensors, files


def hf_config_from_cfg(cfg, eot):
    if hf_family(cfg) == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "vocab_size": cfg["vocab_size"], "n_positions": cfg["seq_len"], "n_ctx": cfg["seq_len"],
                "n_embd": cfg["d_model"], "n_layer": cfg["n_layer"], "n_head": cfg["n_head"],
                "n_inner": cfg["d_ff"], "activation_function": "gelu_new",
                "layer_norm_epsilon": LN_EPS, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                "tie_word_embeddings": True, "bos_token_id": eot, "eos_token_id": eot,
                "torch_dtype": "float32"}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": cfg["vocab_size"], "hidden_size": cfg["d_model"],
            "intermediate_size": cfg["d_ff"], "num_hidden_layers": cfg["n_layer"],
            "num_attention_heads": cfg["n_head"], "num_key_value_heads": cfg["n_kv_head"],
            "max_position_embeddings": cfg["seq_len"], "hidden_act": "silu", "rms_norm_eps": cfg["norm_eps"],
            "rope_theta": cfg["rope_theta"], "rope_scaling": None, "attention_bias": False,
            "attention_dropout": 0.0, "pretraining_tp": 1, "tie_word_embeddings": cfg["tie_embeddings"],
            "initializer_range": 0.02, "use_cache": True, "bos_token_id": eot, "eos_token_id": eot,
            "torch_dtype": "float32"}


def write_hf(d, cfg, tensors, eot, src):
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise UserError("the Python package safetensors is not installed (bash validation/deps.sh)")
    out = {}
    for ours, (theirs, transposed) in hf_names(cfg, src).items():
        x = tensors[ours]
        out[theirs] = np.ascontiguousarray(x.T if transposed else x)
    # tied head: lm_head.weight is not stored (safetensors holds no aliases; transformers re-ties it)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(d, "config.json"), hf_config_from_cfg(cfg, eot))
    gen = {"_from_model_config": True}
    if eot is not None:
        gen.update(bos_token_id=eot, eos_token_id=eot)
    write_json(os.path.join(d, "generation_config.json"), gen)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------ tokenizers
# llmtrain reads tiktoken rank files (base64 token, rank) and GPT-2's vocab.json + merges.txt,
# with <|endoftext|> the id after the last rank (src/io/tokenizer_formats.c). Hugging Face
# byte-level BPE writes tokens in GPT-2's byte-to-unicode alphabet.

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_unicode(b):
    return "".join(BYTE_TO_CHAR[x] for x in b)


def from_unicode(s, where):
    try:
        return bytes(CHAR_TO_BYTE[c] for c in s)
    except KeyError:
        raise UserError("%s: token %r is not in the byte-level alphabet (not a byte-level BPE "
                        "tokenizer)" % (where, s))


def load_ranks(path):
    """A vocabulary llmtrain reads -> list of token bytes, index = rank."""
    if os.path.isdir(path) or path.endswith(".json"):
        vp = os.path.join(path, "vocab.json") if os.path.isdir(path) else path
        vocab = read_json(vp, "vocab.json")
        vocab.pop(EOT_TEXT, None)
        return ranks_from_vocab(vocab, vp)
    need(os.path.isfile(path), "%s: no such file (the tokenizer)" % path)
    ranks = {}
    for i, line in enumerate(open(path, "rb"), 1):
        if not line.strip():
            continue
        parts = line.split()
        need(len(parts) == 2, "%s:%d: expected 'base64 rank'" % (path, i))
        ranks[int(parts[1])] = base64.b64decode(parts[0], validate=True)
    need(sorted(ranks) == list(range(len(ranks))), "%s: ranks are not 0..n-1" % path)
    return [ranks[r] for r in range(len(ranks))]


def ranks_from_vocab(vocab, where):
    toks = sorted(vocab.items(), key=lambda kv: kv[1])
    need([v for _, v in toks] == list(range(len(toks))),
         "%s: token ids are not 0..n-1 (besides %s)" % (where, EOT_TEXT))
    return [from_unicode(k, where) for k, _ in toks]


def merges_from_ranks(tokens):
    """Each multi-byte token's merge (left, right), in rank order: the two parts that BPE with
    the lower ranks leaves (tiktoken's rank order is the merge order)."""
    rank = {t: r for r, t in enumerate(tokens)}
    merges = []
    for r, t in enumerate(tokens):
        if len(t) < 2:
            continue
        parts = [t[i:i + 1] for i in range(len(t))]
        while len(parts) > 2:
            best, at = None, -1
            for i in range(len(parts) - 1):
                q = rank.get(parts[i] + parts[i + 1])
                if q is not None and q < r and (best is None or q < best):
                    best, at = q, i
            need(best is not None, "the tokenizer's token %r cannot be made from lower ranks" % t)
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        merges.append((parts[0], parts[1]))
    return merges


def write_hf_tokenizer(d, tokens, pairs, seq_len):
    """vocab.json, merges.txt, tokenizer.json (GPT-2's byte-level BPE), tokenizer_config.json;
    pairs = merges_from_ranks(tokens)."""
    vocab = {to_unicode(t): i for i, t in enumerate(tokens)}
    eot = len(tokens)
    vocab[EOT_TEXT] = eot
    merges = [to_unicode(a) + " " + to_unicode(b) for a, b in pairs]
    write_json(os.path.join(d, "vocab.json"), vocab)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": eot, "content": EOT_TEXT, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": True, "special": True}],
          "normalizer": None, "pre_tokenizer": byte_level,
          "post_processor": dict(byte_level, trim_offsets=False), "decoder": byte_level,
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                    "vocab": vocab, "merges": merges}}
    write_json(os.path.join(d, "tokenizer.json"), tj)
    write_json(os.path.join(d, "tokenizer_config.json"),
               {"tokenizer_class": "GPT2Tokenizer", "model_max_length": seq_len, "add_prefix_space": False,
                "bos_token": EOT_TEXT, "eos_token": EOT_TEXT, "unk_token": EOT_TEXT})
    write_json(os.path.join(d, "special_tokens_map.json"),
               {"bos_token": EOT_TEXT, "eos_token": EOT_TEXT, "unk_token": EOT_TEXT})
    return eot


def hf_tokenizer_ranks(d):
    """The byte-level BPE vocabulary of a Hugging Face directory as ranks, or (None, why not)."""
    vp, mp, tp = (os.path.join(d, f) for f in ("vocab.json", "merges.txt", "tokenizer.json"))
    if os.path.isfile(tp):
        tj = read_json(tp, "tokenizer.json")
        model, pre = tj.get("model") or {}, tj.get("pre_tokenizer") or {}
        if model.get("type") != "BPE":
            return None, "tokenizer.json's model is %s, not byte-level BPE" % model.get("type")
        if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
            return None, ("tokenizer.json's pre-tokenizer is not GPT-2's (ByteLevel with its regex), "
                          "the only one llmtrain's tokenizer has")
        vocab = dict(model["vocab"])
        merges = model.get("merges") or []
        specials = [t["content"] for t in tj.get("added_tokens", []) if t.get("special")]
        where = tp
    elif os.path.isfile(vp) and os.path.isfile(mp):
        vocab = read_json(vp, "vocab.json")
        merges = [l.rstrip("\n") for l in open(mp, encoding="utf-8") if l.strip() and not l.startswith("#version")]
        specials, where = [EOT_TEXT], vp
    else:
        return None, "no tokenizer.json, vocab.json + merges.txt"
    for s in specials:
        if s in vocab and s != EOT_TEXT:
            return None, "special token %s: llmtrain's tokenizer knows only %s" % (s, EOT_TEXT)
    eot = vocab.pop(EOT_TEXT, None)
    tokens = ranks_from_vocab(vocab, where)
    if eot is not None and eot != len(tokens):
        return None, "%s has id %d; llmtrain's tokenizer needs it right after the last token" % (EOT_TEXT, eot)
    rank = {t: r for r, t in enumerate(tokens)}
    last = 255
    for i, m in enumerate(merges):
        a, b = m.split(" ") if isinstance(m, str) else m
        r = rank.get(from_unicode(a, where) + from_unicode(b, where))
        if r is None or r <= last:
            return None, "%s: merge %d (%s %s) is not in the order of the token ids" % (where, i + 1, a, b)
        last = r
    return tokens, None


def write_tiktoken(path, tokens):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for r, t in enumerate(tokens):
            f.write(base64.b64encode(t) + b" %d\n" % r)
    os.replace(tmp, path)


# ------------------------------------------------------------------ ONNX

class Graph:
    """A little builder over onnx.helper: nodes, initializers, unique names."""

    def __init__(self, onnx):
        self.onnx, self.h = onnx, onnx.helper
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return "%s_%d" % (base, self.n)

    def init(self, name, x):
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(x), name))
        return name

    def const(self, x, dtype):
        return self.init(self.name("c"), np.array(x, dtype=dtype))

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(self.h.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs


def onnx_linear(g, x, w_name, b_name=None):
    """x @ w.T (+ b) for llmtrain's w[out, in], stored transposed once as an initializer."""
    y = g.op("MatMul", [x, w_name])
    return g.op("Add", [y, b_name]) if b_name else y


def onnx_gelu_tanh(g, x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), from primitives (any opset, TensorRT)."""
    x3 = g.op("Mul", [g.op("Mul", [x, x]), x])
    inner = g.op("Add", [x, g.op("Mul", [x3, g.const(0.044715, np.float32)])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.const(math.sqrt(2.0 / math.pi), np.float32)])])
    return g.op("Mul", [g.op("Mul", [x, g.const(0.5, np.float32)]), g.op("Add", [t, g.const(1.0, np.float32)])])


def onnx_rmsnorm(g, x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis (ReduceMean takes axes as an attribute
    up to opset 17)."""
    ms = g.op("ReduceMean", [g.op("Mul", [x, x])], axes=[-1], keepdims=1)
    r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.const(eps, np.float32)])])])
    return g.op("Mul", [g.op("Mul", [x, r]), w])


def onnx_heads(g, x, n, hd):
    """[B, T, n*hd] -> [B, n, T, hd]."""
    r = g.op("Reshape", [x, g.const([0, 0, n, hd], np.int64)])
    return g.op("Transpose", [r], perm=[0, 2, 1, 3])


def onnx_attention(g, q, k, v, mask, hd, C):
    """Causal softmax(q k^T / sqrt(hd)) v over [B, H, T, hd], back to [B, T, C]."""
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Mul", [s, g.const(1.0 / math.sqrt(hd), np.float32)])
    s = g.op("Where", [mask, g.const(-np.inf, np.float32), s])
    y = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3])
    return g.op("Reshape", [y, g.const([0, 0, C], np.int64)])


def onnx_rope(g, x, rope, hd):
    """Rotary embedding in rotate-half form on [B, H, T, hd]: x cos + rotate_half(x) sin."""
    cos, sin = rope
    half = hd // 2
    x1 = g.op("Slice", [x, g.const([0], np.int64), g.const([half], np.int64), g.const([-1], np.int64)])
    x2 = g.op("Slice", [x, g.const([half], np.int64), g.const([hd], np.int64), g.const([-1], np.int64)])
    rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])


def onnx_norm(g, cfg, x, prefix, t):
    if cfg["norm"] == "layernorm":
        return g.op("LayerNormalization", [x, g.init(prefix + "w", t[prefix + "w"]), g.init(prefix + "b", t[prefix + "b"])],
                    axis=-1, epsilon=LN_EPS)
    return onnx_rmsnorm(g, x, g.init(prefix + "w", t[prefix + "w"]), cfg["norm_eps"])


def onnx_block(g, cfg, t, x, l, mask, rope):
    """One pre-norm block: x + attn(norm1(x)), then + mlp(norm2(.)), from llmtrain's tensors."""
    C, H, KV = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"]
    hd = C // H
    p = "h.%d." % l
    W = lambda name: g.init(name, np.ascontiguousarray(t[name].T))  # noqa: E731
    lin = lambda x, name: onnx_linear(g, x, W(name + ".w"), g.init(name + ".b", t[name + ".b"]) if cfg["bias"] else None)  # noqa: E731
    h = onnx_norm(g, cfg, x, p + "ln1.", t)
    if fused_qkv(cfg):
        q, k, v = g.op("Split", [lin(h, p + "attn.qkv"), g.const([C, C, C], np.int64)], n_out=3, axis=-1)
    else:
        q, k, v = (lin(h, p + "attn." + n) for n in "qkv")
    q, k, v = onnx_heads(g, q, H, hd), onnx_heads(g, k, KV, hd), onnx_heads(g, v, KV, hd)
    if rope:
        q, k = onnx_rope(g, q, rope, hd), onnx_rope(g, k, rope, hd)
    if KV != H:  # grouped-query attention: each kv head serves H/KV query heads
        rep = lambda z: g.op("Reshape", [g.op("Expand", [  # noqa: E731
            g.op("Unsqueeze", [z, g.const([2], np.int64)]), g.const([1, 1, H // KV, 1, 1], np.int64)]),
            g.const([0, H, -1, hd], np.int64)])
        k, v = rep(k), rep(v)
    x = g.op("Add", [x, lin(onnx_attention(g, q, k, v, mask, hd, C), p + "attn.proj")])
    h = onnx_norm(g, cfg, x, p + "ln2.", t)
    if cfg["mlp"] == "gelu":
        h = onnx_gelu_tanh(g, lin(h, p + "mlp.fc"))
    else:
        gate = lin(h, p + "mlp.gate")
        h = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), lin(h, p + "mlp.up")])
    return g.op("Add", [x, lin(h, p + "mlp.proj")])


def build_onnx(cfg, t):
    try:
        import onnx
    except ImportError:
        raise UserError("the Python package onnx is not installed (bash validation/deps.sh)")
    g = Graph(onnx)
    hd = cfg["d_model"] // cfg["n_head"]
    ids = "input_ids"
    T = g.op("Gather", [g.op("Shape", [ids]), g.const(1, np.int64)], axis=0)
    pos = g.op("Range", [g.const(0, np.int64), T, g.const(1, np.int64)])
    # causal mask [T, T]: true where the key comes after the query
    mask = g.op("Greater", [g.op("Unsqueeze", [pos, g.const([0], np.int64)]),
                            g.op("Unsqueeze", [pos, g.const([1], np.int64)])])
    g.init("wte", t["wte"])
    x = g.op("Gather", ["wte", ids], axis=0)
    rope = None
    if cfg["pos"] == "learned":
        x = g.op("Add", [x, g.op("Gather", [g.init("wpe", t["wpe"]), pos], axis=0)])
    else:  # angle t * theta^(-2i/hd) for i < hd/2, repeated for the two halves (rotate-half)
        inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = np.outer(np.arange(cfg["seq_len"], dtype=np.float64), inv)
        ang = np.concatenate([ang, ang], axis=1)
        rope = (g.op("Gather", [g.init("rope_cos", np.cos(ang).astype(np.float32)), pos], axis=0),
                g.op("Gather", [g.init("rope_sin", np.sin(ang).astype(np.float32)), pos], axis=0))
    for l in range(cfg["n_layer"]):
        x = onnx_block(g, cfg, t, x, l, mask, rope)
    x = onnx_norm(g, cfg, x, "lnf.", t)
    head = "wte" if cfg["tie_embeddings"] else g.init("lm_head.w", t["lm_head.w"])
    g.nodes.append(g.h.make_node("MatMul", [x, g.op("Transpose", [head], perm=[1, 0])], ["logits"]))
    inp = g.h.make_tensor_value_info(ids, onnx.TensorProto.INT64, ["batch", "sequence"])
    out = g.h.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", "sequence", cfg["vocab_size"]])
    graph = g.h.make_graph(g.nodes, "llmtrain_%s" % cfg["arch"], [inp], [out], g.inits)
    model = g.h.make_model(graph, opset_imports=[g.h.make_opsetid("", ONNX_OPSET)],
                           producer_name="llmconvert", producer_version=llmtrain_version())
    model.doc_string = ("llmtrain %s: logits[batch, sequence, %d] of input_ids[batch, sequence] "
                        "(int64, causal); opset %d; dynamic axes batch and sequence (sequence <= %d)"
                        % (cfg["arch"], cfg["vocab_size"], ONNX_OPSET, cfg["seq_len"]))
    for k, v in (("opset", str(ONNX_OPSET)), ("dynamic_axes", "input_ids: 0=batch 1=sequence; logits: 0=batch 1=sequence"),
                 ("max_sequence", str(cfg["seq_len"])), ("arch", cfg["arch"])):
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    return onnx, model


def write_onnx(path, cfg, tensors):
    onnx, model = build_onnx(cfg, tensors)
    big = sum(x.nbytes for x in tensors.values()) > (1 << 31) - (1 << 27)
    if big:  # protobuf's 2 GiB limit: the weights go to OUT.data beside the graph
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data")
        onnx.checker.check_model(path)
    else:
        onnx.checker.check_model(model)
        onnx.save_model(model, path)


# ------------------------------------------------------------------ the three directions

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def stem(path):
    return path[:-3] if path.endswith(".h5") else path


def to_hdf5(src, out):
    need(out.endswith(".h5"), "%s: the output of --to hdf5 is an .h5 file" % out)
    cfg, tensors, files = read_hf(src)
    prov = {"run_id": "hf-" + hashlib.sha256(b"".join(sha256_file(p).encode() for p in files)).hexdigest()[:16],
            "tool": "llmconvert --to hdf5", "source": os.path.abspath(src),
            "source_sha256": " ".join(sha256_file(p) for p in files),
            "converted": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    snippet = model_namelist(cfg, out)
    tokens, why = hf_tokenizer_ranks(src)
    if tokens is not None:
        need(len(tokens) <= cfg["vocab_size"], "%s: the tokenizer has %d tokens, more than vocab_size "
             "%d" % (src, len(tokens), cfg["vocab_size"]))
        write_tiktoken(stem(out) + ".tiktoken", tokens)
        snippet += "&data\n  tokenizer = '%s.tiktoken'\n/\n" % stem(out)
    write_hdf5(out, cfg, tensors, snippet, prov)
    with open(stem(out) + ".nml", "w") as f:
        f.write(snippet)
    print("llmconvert: %s (%s, %d parameters) -> %s" % (src, cfg["arch"], sum(x.size for x in tensors.values()), out))
    print("llmconvert: tokenizer: %s" % ("%s.tiktoken (%d tokens)" % (stem(out), len(tokens)) if tokens else "none (%s)" % why))
    print("llmconvert: namelist keys (also in %s.nml):" % stem(out))
    sys.stdout.write(snippet)


def find_tokenizer(given, config_text, h5_path):
    if given:
        need(os.path.exists(given), "--tokenizer %s: no such file" % given)
        return given, None
    p = namelist_value(config_text, "data", "tokenizer")
    if not p:
        return None, "the run has no &data tokenizer (give --tokenizer PATH)"
    p = expand_env(p)
    for c in (p, os.path.join(os.path.dirname(h5_path), p)):
        if os.path.exists(c):
            return c, None
    return None, "&data tokenizer = '%s' does not exist here (give --tokenizer PATH)" % p


def to_hf(src, out, tokenizer):
    cfg, tensors, text = read_hdf5(src)
    hf_names(cfg, src)  # refuses a model no Hugging Face architecture describes, before writing
    tok_path, why = find_tokenizer(tokenizer, text, src)
    tokens = load_ranks(tok_path) if tok_path else None
    if tokens is not None:
        need(len(tokens) < cfg["vocab_size"], "%s: the tokenizer has %d tokens + %s, more than the "
             "model's vocab_size %d" % (tok_path, len(tokens), EOT_TEXT, cfg["vocab_size"]))
    pairs = merges_from_ranks(tokens) if tokens is not None else None  # may refuse: before writing
    os.makedirs(out, exist_ok=True)
    eot = write_hf_tokenizer(out, tokens, pairs, cfg["seq_len"]) if tokens is not None else None
    write_hf(out, cfg, tensors, eot, src)
    print("llmconvert: %s (%s) -> %s (config.json, model.safetensors)" % (src, cfg["arch"], out))
    print("llmconvert: tokenizer: %s" % ("%s -> vocab.json, merges.txt, tokenizer.json" % tok_path if tokens else "none (%s)" % why))


def to_onnx(src, out):
    if os.path.isdir(src):
        cfg, tensors, _ = read_hf(src)
    else:
        cfg, tensors, _ = read_hdf5(src)
    write_onnx(out, cfg, tensors)
    print("llmconvert: %s (%s) -> %s (opset %d, dynamic axes batch and sequence)" % (src, cfg["arch"], out, ONNX_OPSET))


def main(argv):
    ap = argparse.ArgumentParser(prog="llmconvert", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--to", required=True, choices=["hdf5", "hf", "onnx"])
    ap.add_argument("--tokenizer", help="--to hf: the vocabulary to export (tiktoken file, vocab.json or its directory)")
    ap.add_argument("input")
    ap.add_argument("output")
    a = ap.parse_args(argv)
    try:
        if a.to == "hdf5":
            need(os.path.isdir(a.input), "%s: --to hdf5 reads a Hugging Face directory "
                 "(config.json + model.safetensors)" % a.input)
            to_hdf5(a.input, a.output)
        elif a.to == "hf":
            to_hf(a.input, a.output, a.tokenizer)
        else:
            to_onnx(a.input, a.output)
    except UserError as e:
        print("llmconvert: %s" % e, file=sys.stderr)
        return EXIT_USER
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
