"""Hugging Face models newer than the transformers here (4.36.2), for the llmconvert tests:
Qwen2ForCausalLM (transformers 4.37) and Llama 3.1's rope_scaling {"rope_type": "llama3"} (4.43),
run on 4.36.2's own LlamaForCausalLM with the one piece each adds written here from the
published code:

  Qwen 2  modeling_qwen2.py's Qwen2Attention is LlamaAttention with bias=True on q_proj, k_proj,
          v_proj and bias=False on o_proj (the rest of the decoder layer, RMSNorm, SwiGLU MLP and
          rotary embedding is Llama's): here LlamaForCausalLM(attention_bias=True) with every
          o_proj.bias held at zero.
  llama3  modeling_rope_utils.py's _compute_llama3_parameters: inv_freq (fp32) as the default,
          wavelen = 2 pi / inv_freq; wavelen > original / low_freq_factor: inv_freq / factor;
          wavelen < original / high_freq_factor: kept; between: (1 - s) inv / factor + s inv with
          s = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
          attention factor 1. Here it replaces each layer's rotary inv_freq and its cos/sin cache.

load(d) gives the model of a directory of either kind (or any other AutoModelForCausalLM one);
make(d, kind, seed) writes a random tiny one with the config.json and safetensors layout that
save_pretrained of those versions writes (the same tensor names as Llama; Qwen 2 without
o_proj.bias). Uses torch and transformers, imported inside the functions (onnx must be imported
before torch, so a process that runs onnxruntime imports this module first).
"""
import json
import math
import os


def llama3_inv_freq(inv_freq, rs):
    import torch
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def llama_config_of(c):
    """A 4.36.2 LlamaConfig for a Llama 3.1 / Qwen 2 config.json dict (rope_scaling left out)."""
    from transformers import LlamaConfig
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "tie_word_embeddings", "hidden_act", "bos_token_id", "eos_token_id")
    return LlamaConfig(**{k: c[k] for k in keep if k in c}, attention_bias=c.get("model_type") == "qwen2")


def patch(m, c):
    """The pieces 4.36.2 lacks, on a LlamaForCausalLM built from config.json dict c."""
    import torch
    rs = c.get("rope_scaling")
    for layer in m.model.layers:
        if rs:
            rot = layer.self_attn.rotary_emb
            rot.inv_freq = llama3_inv_freq(rot.inv_freq, rs)
            rot._set_cos_sin_cache(rot.max_seq_len_cached, rot.inv_freq.device, torch.get_default_dtype())
        if c.get("model_type") == "qwen2":
            with torch.no_grad():
                layer.self_attn.o_proj.bias.zero_()
            layer.self_attn.o_proj.bias.requires_grad_(False)
    return m


def newer(c):
    return c.get("model_type") == "qwen2" or (c.get("model_type") == "llama" and c.get("rope_scaling"))


def load(d):
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    c = json.load(open(os.path.join(d, "config.json")))
    if not newer(c):
        return AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    from safetensors.torch import load_file
    m = LlamaForCausalLM(llama_config_of(c)).float()
    sd = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    allowed = {k for k in missing if k.endswith("o_proj.bias") or (k == "lm_head.weight" and c.get("tie_word_embeddings"))}
    assert not unexpected and set(missing) == allowed, (missing, unexpected)
    if c.get("tie_word_embeddings"):
        m.tie_weights()
    return patch(m, c).eval()


def make(d, kind, seed, base):
    """A random tiny Llama 3.1 ('llama3') or Qwen 2 ('qwen2') in d; base: LlamaConfig kwargs."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM
    torch.manual_seed(int(seed))
    c = dict(base)
    if kind == "llama3":
        c.update(model_type="llama", architectures=["LlamaForCausalLM"],
                 rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64, "rope_type": "llama3"})
    else:
        c.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=False,
                 sliding_window=c["max_position_embeddings"], max_window_layers=c["num_hidden_layers"],
                 attention_dropout=0.0)
    m = LlamaForCausalLM(llama_config_of(c))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sd = {k: v.contiguous() for k, v in m.state_dict().items()
          if not k.endswith("o_proj.bias") and not k.endswith("rotary_emb.inv_freq")}
    os.makedirs(d, exist_ok=True)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c.update(hidden_act="silu", initializer_range=0.02, use_cache=True, torch_dtype="float32",
             transformers_version="4.43.0" if kind == "llama3" else "4.37.0")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
