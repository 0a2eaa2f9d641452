"""convert_hf — Hugging Face checkpoints for llmconvert: config.json to and from llmtrain's &model
keys (GPT2LMHeadModel, LlamaForCausalLM with Llama 3.1's rope_scaling, MistralForCausalLM,
Qwen2ForCausalLM; what cannot be converted is refused by name), and
safetensors files read and written with numpy (read_hf, write_hf).
Uses: convert_weights, numpy. Used by: llmconvert.
"""

import json
import os
import re
import numpy as np

from convert_weights import (EXTRA_DEFAULTS, GPT2_SWITCHES, hf_family, hf_names, LLAMA_SWITCHES, LN_EPS,
                             need, param_shapes, replaced_when_done, SWITCH_DEFAULTS, UserError,
                             VOCAB_MAX)

# The Llama-like families: model_type -> the class config.json names
LLAMA_LIKE = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


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
    if mtype in LLAMA_LIKE:
        return llama_config(hf, field, refuse, mtype)
    refuse("model_type", "llmconvert imports 'gpt2' (GPT2LMHeadModel), 'llama' (LlamaForCausalLM), "
           "'mistral' (MistralForCausalLM) and 'qwen2' (Qwen2ForCausalLM)")


def common_checks(cfg, field, refuse, vocab_key):
    if not 1 <= cfg["vocab_size"] <= VOCAB_MAX:
        refuse(vocab_key, "llmtrain's &model vocab_size is at most %d (its padded vocabulary, a "
               "multiple of 128, is a 32-bit integer)" % VOCAB_MAX)
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


def rope_scaling(hf, refuse):
    """config.json's rope_scaling -> the &model rope_scaling keys (None, or Llama 3.1's 'llama3')."""
    rs = hf.get("rope_scaling")
    if rs is None:
        return {}
    kind = rs.get("rope_type", rs.get("type")) if isinstance(rs, dict) else None
    if kind != "llama3":
        refuse("rope_scaling", "llmtrain's rotary embedding knows no scaling and Llama 3.1's "
               "{\"rope_type\": \"llama3\", ...} only")
    keys = {"factor": "rope_scaling_factor", "low_freq_factor": "rope_low_freq_factor",
            "high_freq_factor": "rope_high_freq_factor"}
    out = {"rope_scaling": "llama3"}
    for theirs, ours in keys.items():
        if not isinstance(rs.get(theirs), (int, float)) or not rs[theirs] > 0:
            refuse("rope_scaling", "its '%s' must be a positive number" % theirs)
        out[ours] = float(rs[theirs])
    L = rs.get("original_max_position_embeddings")
    if type(L) is not int or L < 1:
        refuse("rope_scaling", "its 'original_max_position_embeddings' must be a positive integer")
    out["rope_original_max_positions"] = L
    if not out["rope_high_freq_factor"] > out["rope_low_freq_factor"]:
        refuse("rope_scaling", "its 'high_freq_factor' must exceed 'low_freq_factor'")
    if out["rope_scaling_factor"] < 1:
        refuse("rope_scaling", "its 'factor' must be at least 1")
    return out


def llama_config(hf, field, refuse, mtype):
    cls = LLAMA_LIKE[mtype]
    arch = field("architectures") or [cls]
    if cls not in arch:
        refuse("architectures", "only %s (the language-model head) is imported" % cls)
    if field("hidden_act", "silu") != "silu":
        refuse("hidden_act", "llmtrain's SwiGLU uses SiLU")
    if field("attention_bias", False):
        refuse("attention_bias", "llmtrain's Llama has biases on q, k, v alone (Qwen 2), not on o_proj")
    if field("mlp_bias", False):
        refuse("mlp_bias", "llmtrain's Llama has no MLP biases")
    if not float(field("rms_norm_eps", 1e-6)) > 0:
        refuse("rms_norm_eps", "must be positive")
    if int(field("pretraining_tp", 1)) != 1:
        refuse("pretraining_tp", "only 1 (the exact matrix products) is supported")
    if mtype == "qwen2" and field("use_sliding_window", False):
        refuse("use_sliding_window", "llmtrain's attention is full causal attention in every layer")
    H = int(field("num_attention_heads", 32))
    cfg = dict(LLAMA_SWITCHES, **EXTRA_DEFAULTS)
    cfg.update({"arch": "llama", "vocab_size": int(field("vocab_size", 32000)),
           "n_layer": int(field("num_hidden_layers", 32)), "n_head": H,
           "n_kv_head": int(field("num_key_value_heads") or H),
           "d_model": int(field("hidden_size", 4096)), "d_ff": int(field("intermediate_size", 11008)),
           "seq_len": int(field("max_position_embeddings", 2048)),
           "rope_theta": float(field("rope_theta", 10000.0)), "norm_eps": float(field("rms_norm_eps", 1e-6)),
           "tie_embeddings": bool(field("tie_word_embeddings", False)), "qkv_bias": mtype == "qwen2"})
    cfg.update(rope_scaling(hf, refuse))
    if mtype == "mistral" and field("sliding_window") is not None:
        sw = field("sliding_window")
        if type(sw) is not int or sw < 1:
            refuse("sliding_window", "must be a positive integer or null")
        # full causal attention is the window's while seq_len <= sliding_window (&model refuses more)
        cfg["sliding_window"] = sw
        cfg["seq_len"] = min(cfg["seq_len"], sw)
    if field("head_dim") is not None and field("head_dim") * H != cfg["d_model"]:
        refuse("head_dim", "llmtrain's head size is hidden_size / num_attention_heads = %d / %d"
               % (cfg["d_model"], H))
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


def scan_safetensors(path):
    """name -> (path, dtype, shape, first byte, end byte) of the tensors of a .safetensors file (8-byte
    header length, JSON header, data), every header entry checked against the file; no tensor data
    is read (safetensors_loader reads one)."""
    with open(path, "rb") as f:
        head = f.read(8)
        need(len(head) == 8, "%s: not a safetensors file (shorter than its header)" % path)
        n = int.from_bytes(head, "little")
        need(n < (1 << 27), "%s: not a safetensors file (header of %d bytes)" % (path, n))
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise UserError("%s: not a safetensors file (header: %s)" % (path, e))
        size = os.fstat(f.fileno()).st_size - 8 - n
    need(isinstance(header, dict), "%s: not a safetensors file (its header is a JSON %s, not an "
         "object of tensor name -> {dtype, shape, data_offsets})" % (path, type(header).__name__))
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
        need(0 <= b <= e <= size, "%s lies outside the file (field 'data_offsets' %r; truncated?)" % (where, offs))
        if dtype == "BF16":
            need((e - b) % 2 == 0, "%s: field 'data_offsets' spans %d bytes, not whole BF16 elements" % (where, e - b))
            count = (e - b) // 2
        else:
            need(dtype in SAFETENSORS_DTYPES, "%s: field 'dtype' is %s, which llmconvert does not read" % (where, dtype))
            item = np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize
            need((e - b) % item == 0, "%s: field 'data_offsets' spans %d bytes, not whole %s elements" % (where, e - b, dtype))
            count = (e - b) // item
        need(count == int(np.prod(shape)), "%s: tensor '%s' has %d elements, its shape %s says %d" %
             (path, name, count, shape, int(np.prod(shape))))
        out[name] = (path, dtype, tuple(shape), 8 + n + b, 8 + n + e)
    return out


def safetensors_load(entry):
    """The array of one scan_safetensors entry, read from its file alone (no memory map, whose
    pages would stay resident: a conversion holds a few tensors, never the file); BF16 is widened
    to float32 exactly (its bits are a float32's upper half), which numpy cannot hold."""
    path, dtype, shape, b, e = entry
    with open(path, "rb") as f:
        f.seek(b)
        t = np.dtype("<u2" if dtype == "BF16" else SAFETENSORS_DTYPES[dtype])
        x = np.fromfile(f, dtype=t, count=(e - b) // t.itemsize)
    need(x.nbytes == e - b, "%s: the data of a tensor ends early (truncated file?)" % path)
    if dtype == "BF16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return x.reshape(shape)


def is_floating(dtype):
    return dtype == "BF16" or np.issubdtype(np.dtype(SAFETENSORS_DTYPES[dtype]), np.floating)


def read_hf(d):
    """A Hugging Face directory -> (cfg, tensors, source files): names, dtypes and shapes checked
    from the safetensors headers; the tensors are loaders (convert_weights.py)."""
    need(os.path.isdir(d), "%s: no such directory (a Hugging Face checkpoint: config.json + "
         "model.safetensors)" % d)
    cpath = os.path.join(d, "config.json")
    cfg = hf_config_to_cfg(read_json(cpath, "the model's config.json"), cpath)
    raw = {}
    files = safetensors_files(d)
    for p in files:
        need(os.path.isfile(p), "%s: no such file (named by the safetensors index)" % p)
        raw.update(scan_safetensors(p))
    prefix = "transformer." if hf_family(cfg) == "gpt2" else "model."
    if not any(k.startswith(prefix) for k in raw):  # saved from the bare GPT2Model / LlamaModel
        raw = {prefix + k: v for k, v in raw.items()}
    tensors = {}
    shapes = param_shapes(cfg)
    for ours, (theirs, transposed) in hf_names(cfg, d).items():
        need(theirs in raw, "%s: tensor '%s' is missing" % (d, theirs))
        entry = raw.pop(theirs)
        need(is_floating(entry[1]), "%s: tensor '%s' has dtype %s" %
             (d, theirs, "bfloat16" if entry[1] == "BF16" else np.dtype(SAFETENSORS_DTYPES[entry[1]])))
        shape = entry[2][::-1] if transposed else entry[2]
        need(tuple(shape) == shapes[ours], "%s: tensor '%s' has shape %s, config.json "
             "implies %s" % (d, theirs, list(entry[2]), list(shapes[ours] if not transposed else shapes[ours][::-1])))
        tensors[ours] = hf_loader(entry, transposed)
    head = raw.pop("lm_head.weight", None)
    if head is not None:  # two tensors at once, before anything is written
        need(np.array_equal(safetensors_load(head).astype(np.float32), tensors["wte"]()),
             "%s: tensor 'lm_head.weight' differs from the token embedding, but config.json ties "
             "them (tie_word_embeddings)" % d)
    for k in list(raw):  # GPT-2's causal-mask buffers, saved by older transformers versions
        if re.fullmatch(r"transformer\.h\.\d+\.attn\.(bias|masked_bias)", k) or k.endswith("rotary_emb.inv_freq"):
            raw.pop(k)
    need(not raw, "%s: tensor '%s' is not part of the model llmtrain builds" % (d, sorted(raw)[0] if raw else ""))
    return cfg, tensors, files


def hf_loader(entry, transposed):
    """The loader of one Hugging Face tensor in llmtrain's layout: float32, [out, in], contiguous."""
    def load():
        x = safetensors_load(entry).astype(np.float32)
        return np.ascontiguousarray(x.T if transposed else x)
    return load


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
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
          "vocab_size": cfg["vocab_size"], "hidden_size": cfg["d_model"],
          "intermediate_size": cfg["d_ff"], "num_hidden_layers": cfg["n_layer"],
          "num_attention_heads": cfg["n_head"], "num_key_value_heads": cfg["n_kv_head"],
          "max_position_embeddings": cfg["seq_len"], "hidden_act": "silu", "rms_norm_eps": cfg["norm_eps"],
          "rope_theta": cfg["rope_theta"], "rope_scaling": None, "attention_bias": False,
          "attention_dropout": 0.0, "pretraining_tp": 1, "tie_word_embeddings": cfg["tie_embeddings"],
          "initializer_range": 0.02, "use_cache": True, "bos_token_id": eot, "eos_token_id": eot,
          "torch_dtype": "float32"}
    if cfg.get("rope_scaling", "none") == "llama3":  # as Llama 3.1's config.json writes it
        hf["rope_scaling"] = {"factor": cfg["rope_scaling_factor"], "low_freq_factor": cfg["rope_low_freq_factor"],
                              "high_freq_factor": cfg["rope_high_freq_factor"],
                              "original_max_position_embeddings": cfg["rope_original_max_positions"],
                              "rope_type": "llama3"}
    if cfg.get("qkv_bias"):  # Qwen2ForCausalLM's config.json (transformers >= 4.37)
        for k in ("attention_bias", "pretraining_tp"):
            del hf[k]
        hf.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                  sliding_window=cfg["seq_len"], max_window_layers=cfg["n_layer"])
    elif cfg.get("sliding_window"):  # MistralForCausalLM's
        for k in ("attention_bias", "pretraining_tp"):
            del hf[k]
        hf.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=cfg["sliding_window"])
    return hf


def write_hf_weights(d, cfg, tensors, src):
    """model.safetensors (write_safetensors: tensor by tensor; a loader's error leaves none)."""
    shapes, out = param_shapes(cfg), {}
    for ours, (theirs, transposed) in hf_names(cfg, src).items():
        out[theirs] = (tensors[ours], transposed, shapes[ours][::-1] if transposed else shapes[ours])
    # tied head: lm_head.weight is not stored (safetensors holds no aliases; transformers re-ties it)
    write_safetensors(os.path.join(d, "model.safetensors"), out, {"format": "pt"})


def write_hf_config(d, cfg, eot):
    """config.json and generation_config.json."""
    write_json(os.path.join(d, "config.json"), hf_config_from_cfg(cfg, eot))
    gen = {"_from_model_config": True}
    if eot is not None:
        gen.update(bos_token_id=eot, eos_token_id=eot)
    write_json(os.path.join(d, "generation_config.json"), gen)


def write_safetensors(path, out, metadata):
    """A .safetensors file of float32 tensors, byte for byte what safetensors' save_file writes
    (its header: compact JSON, __metadata__ first, then the tensors in name order with contiguous
    data_offsets, padded with spaces to a multiple of 8; then the data in that order), but written
    one tensor at a time: out maps each Hugging Face name to (llmtrain loader, transposed, its shape
    in the file), so the header is written before any tensor is read. Written to path.tmp, renamed
    when complete."""
    header, offset = {"__metadata__": metadata}, 0
    for theirs in sorted(out):
        shape = [int(v) for v in out[theirs][2]]
        nbytes = 4 * int(np.prod(shape))
        header[theirs] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with replaced_when_done(path) as tmp, open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for theirs in sorted(out):
            load, transposed, _ = out[theirs]
            x = load()
            x = np.ascontiguousarray(x.T if transposed else x, dtype="<f4")
            need(list(x.shape) == header[theirs]["shape"], "%s: tensor '%s' has shape %s, not %s" %
                 (path, theirs, list(x.shape), header[theirs]["shape"]))
            f.write(x.data)
            del x


def write_json(path, obj):
    with replaced_when_done(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
