"""convert_onnx — ONNX export of llmtrain's inference graph for llmconvert, built with the onnx
helper API (Graph; GPT-2 and Llama blocks: layernorm or RMSNorm, GELU or SwiGLU, RoPE, causal
attention). onnx is imported only when exporting. Uses: convert_weights, numpy. Used by: llmconvert.
"""

import math
import os
import numpy as np

from convert_weights import (fused_qkv, llmtrain_version, LN_EPS, ONNX_OPSET, rope_inv_freq, UserError)


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
    lin = lambda x, name: onnx_linear(g, x, W(name + ".w"), g.init(name + ".b", t[name + ".b"]) if name + ".b" in t else None)  # noqa: E731
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
    else:  # angle t * inv_i (theta^(-2i/hd), Llama 3.1's bands with rope_scaling) for i < hd/2,
        inv = rope_inv_freq(cfg, hd)  # repeated for the two halves (rotate-half)
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
