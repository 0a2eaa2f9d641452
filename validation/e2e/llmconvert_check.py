#!/usr/bin/env python3
"""The references of the llmconvert tests: the real transformers (PyPI, 4.36.2), onnxruntime and
tiktoken, on files llmconvert and llmtrain wrote. Subcommands (each exits 1 with the numbers
that differ):

  make-hf DIR ARCH SEED [DTYPE]  a randomly initialised GPT2LMHeadModel / LlamaForCausalLM /
                                 MistralForCausalLM (ARCH gpt2, llama, mistral), or a Llama 3.1
                                 (llama3) / Qwen2ForCausalLM (qwen2) by ../reference/hf_newer.py (every
                                 tensor, biases and norms too, perturbed so a swapped or
                                 transposed one shows), saved with save_pretrained (safetensors),
                                 in float32 or DTYPE (bfloat16, float16)
  widened A.h5 B.h5 DTYPE        every /model tensor of B equals A's rounded to DTYPE by torch
                                 and widened back (an import of the DTYPE copy of A's model)
  ids OUT.i32 B T VOCAB SEED     random token ids [B, T] (int32)
  hf-logits DIR IDS B T OUT.f32  transformers' logits [B, T, vocab] (fp32)
  ort-logits ONNX IDS B T OUT    onnxruntime's logits; also checks the file's opset and that its
                                 input and output axes 0, 1 are the named dims batch, sequence
  compare NAME A.f32 B.f32 TOL   max |a - b| <= TOL * max(1, max |a|)  (fp32 rounding)
  hf-loss DIR VALFILE T B N OUT  transformers' mean loss over the first N batches of B windows
                                 of T+1 tokens of an llm.c shard (llmtrain's validation
                                 windows), written to OUT
  same-safetensors A B           the two model.safetensors hold the same tensors, bit for bit
  tokenizer DIR TIKTOKEN         AutoTokenizer(DIR) and tiktoken (the rank file) give the same ids
                                 for a text with spaces, punctuation, digits, UTF-8; decode back
  generate DIR N OUT IDS...      greedy model.generate of N tokens after the prompt ids: the new
                                 ids, written to OUT

Several subcommands can run in one process (torch and transformers load once), separated by
'+': llmconvert_check.py hf-logits ... + tokenizer ... + generate ...
"""
import base64
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import hf_newer  # noqa: E402  Llama 3.1's rope_scaling and Qwen 2 on transformers 4.36.2


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def make_hf(d, arch, seed, dtype="float32"):
    import torch
    torch.manual_seed(int(seed))
    small = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                 intermediate_size=160, vocab_size=500, max_position_embeddings=32, rms_norm_eps=1e-6,
                 rope_theta=500000.0, tie_word_embeddings=False)
    if arch in ("llama3", "qwen2"):
        return hf_newer.make(d, arch, seed, small)
    if arch == "mistral":  # its window 32 of 64 positions: imported as seq_len 32
        from transformers import MistralConfig, MistralForCausalLM
        m = MistralForCausalLM(MistralConfig(**dict(small, max_position_embeddings=64, sliding_window=32)))
    elif arch == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_inner=256, vocab_size=500, n_positions=32)
        m = GPT2LMHeadModel(cfg)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          hidden_size=64, intermediate_size=160, vocab_size=500,
                          max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=500000.0,
                          tie_word_embeddings=False)
        m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m.to(getattr(torch, dtype)).save_pretrained(d, safe_serialization=True)


def widened(a_path, b_path, dtype):
    import h5py
    import torch
    with h5py.File(a_path, "r") as fa, h5py.File(b_path, "r") as fb:
        names = sorted(fa["model"])
        if names != sorted(fb["model"]):
            fail("widened: the files hold different tensors")
        for n in names:
            want = torch.from_numpy(fa["model"][n][...]).to(getattr(torch, dtype)).float().numpy()
            if want.tobytes() != fb["model"][n][...].tobytes():
                fail("widened: /model/%s is not the %s rounding of the float32 model" % (n, dtype))
    print("widened: %d tensors of the %s import equal torch's rounding of the float32 ones" % (len(names), dtype))


def read_f32(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


def hf_model(d):
    import torch
    torch.set_grad_enabled(False)
    return hf_newer.load(d)


def hf_logits(d, ids_path, B, T, out):
    import torch
    ids = np.fromfile(ids_path, dtype="<i4").reshape(B, T)
    y = hf_model(d)(torch.tensor(ids, dtype=torch.long)).logits.numpy().astype("<f4")
    y.tofile(out)


def ort_logits(path, ids_path, B, T, out):
    import onnx
    import onnxruntime as ort
    m = onnx.load(path)
    opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if opset != [17]:
        fail("%s: opset %s, expected 17" % (path, opset))
    for v, what in ((m.graph.input[0], "input"), (m.graph.output[0], "output")):
        dims = [d.dim_param for d in v.type.tensor_type.shape.dim[:2]]
        if dims != ["batch", "sequence"]:
            fail("%s: %s %s has axes %s, expected the dynamic axes batch, sequence" % (path, what, v.name, dims))
    ids = np.fromfile(ids_path, dtype="<i4").reshape(B, T).astype(np.int64)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = s.run(["logits"], {"input_ids": ids})[0]
    y.astype("<f4").tofile(out)


def compare(name, a_path, b_path, tol):
    a, b = np.fromfile(a_path, dtype="<f4"), np.fromfile(b_path, dtype="<f4")
    if a.size != b.size or a.size == 0:
        fail("%s: %d vs %d values" % (name, a.size, b.size))
    scale = max(1.0, float(np.abs(a).max()))
    err = float(np.abs(a.astype(np.float64) - b).max())
    print("%s: %d logits, max |diff| %.2e, max |logit| %.2f, tolerance %.1e x max(1, max|logit|)"
          % (name, a.size, err, scale, tol))
    if not err <= tol * scale:
        fail("%s: max |diff| %.3e > %.1e" % (name, err, tol * scale))


def hf_loss(d, val, T, B, n, out):
    import torch
    import torch.nn.functional as F
    tok = np.fromfile(val, dtype="<u2", offset=1024).astype(np.int64)
    m = hf_model(d)
    total = 0.0
    for i in range(n):
        w = np.stack([tok[s * T: s * T + T + 1] for s in range(i * B, i * B + B)])
        x = torch.tensor(w)
        logits = m(x[:, :-1]).logits
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), x[:, 1:].reshape(-1)).item()
    with open(out, "w") as f:
        f.write("%.9f\n" % (total / n))


def same_safetensors(a, b):
    from safetensors.numpy import load_file
    x, y = load_file(a), load_file(b)
    x.pop("lm_head.weight", None)  # tied: save_pretrained may or may not store the alias
    y.pop("lm_head.weight", None)
    if sorted(x) != sorted(y):
        fail("tensor names differ: %s" % sorted(set(x) ^ set(y)))
    for k in x:
        if x[k].shape != y[k].shape or x[k].astype("<f4").tobytes() != y[k].astype("<f4").tobytes():
            fail("tensor %s differs" % k)
    print("same-safetensors: %d tensors bit-identical" % len(x))


TEXT = ("Hello world! It's 2026: the  quick brown fox's 3 jumps, naïve café — "
        "日本語 and emoji 🙂.\n\nNew paragraph   with spaces\tand tabs.")


def tokenizer(d, tiktoken_path):
    import tiktoken
    from transformers import AutoTokenizer
    ranks = {}
    for line in open(tiktoken_path, "rb"):
        if line.strip():
            t, r = line.split()
            ranks[base64.b64decode(t)] = int(r)
    pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding("ref", pat_str=pat, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": len(ranks)})
    want = enc.encode(TEXT)
    hf = AutoTokenizer.from_pretrained(d)
    got = hf(TEXT)["input_ids"]
    if got != want:
        fail("tokenizer: transformers %s... vs tiktoken %s..." % (got[:20], want[:20]))
    slow = AutoTokenizer.from_pretrained(d, use_fast=False)(TEXT)["input_ids"]
    if slow != want:
        fail("tokenizer: transformers' slow GPT2Tokenizer (vocab.json + merges.txt) differs")
    if hf.decode(got) != TEXT:
        fail("tokenizer: decode does not give the text back")
    eot = hf.convert_tokens_to_ids("<|endoftext|>")
    if eot != len(ranks):
        fail("tokenizer: <|endoftext|> is %s, expected %d" % (eot, len(ranks)))
    print("tokenizer: %d ids equal to tiktoken's (fast and slow tokenizers), decoded back; "
          "<|endoftext|> = %d" % (len(got), eot))


def generate(d, n, out, ids):
    import torch
    m = hf_model(d)
    x = torch.tensor([[int(i) for i in ids]])
    y = m.generate(x, max_new_tokens=int(n), do_sample=False, pad_token_id=0)
    with open(out, "w") as f:
        f.write(" ".join(str(int(t)) for t in y[0, x.shape[1]:]) + "\n")


def main(a):
    cmd = a[0]
    if cmd == "make-hf":
        make_hf(*a[1:5])
    elif cmd == "widened":
        widened(a[1], a[2], a[3])
    elif cmd == "ids":
        B, T, V, seed = (int(x) for x in a[2:6])
        np.random.default_rng(seed).integers(0, V, size=(B, T)).astype("<i4").tofile(a[1])
    elif cmd == "hf-logits":
        hf_logits(a[1], a[2], int(a[3]), int(a[4]), a[5])
    elif cmd == "ort-logits":
        ort_logits(a[1], a[2], int(a[3]), int(a[4]), a[5])
    elif cmd == "compare":
        compare(a[1], a[2], a[3], float(a[4]))
    elif cmd == "hf-loss":
        hf_loss(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), a[6])
    elif cmd == "same-safetensors":
        same_safetensors(a[1], a[2])
    elif cmd == "tokenizer":
        tokenizer(a[1], a[2])
    elif cmd == "generate":
        generate(a[1], a[2], a[3], a[4:])
    else:
        fail("unknown subcommand %s" % cmd)


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no notes about model_max_length
    args, cmds = sys.argv[1:], [[]]
    for x in args:
        if x == "+":
            cmds.append([])
        else:
            cmds[-1].append(x)
    for c in cmds:
        main(c)
