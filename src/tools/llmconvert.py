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
`&model arch = 'llama'`; Llama 3.1's rope_scaling <-> &model rope_scaling = 'llama3';
Qwen2ForCausalLM <-> qkv_bias = .true.; MistralForCausalLM <-> sliding_window, imported at a
seq_len no longer than the window). Weights are fp32 in llmtrain's files; an fp16/bf16 Hugging Face
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

The code, beside this file: convert_weights.py (the parameter registry, checksums, llmtrain
weights files), convert_hf.py (config.json, safetensors), convert_tokenizer.py, convert_onnx.py;
this file is the command line and the three directions.
"""

import argparse
import datetime
import hashlib
import os
import shutil
import sys
import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_weights import (EOT_TEXT, EXIT_USER, expand_env, hf_names, load_all, model_namelist,
                             namelist_value, need, ONNX_OPSET, param_shapes, read_hdf5, UserError,
                             write_hdf5)  # noqa: E402
from convert_hf import (read_hf, write_hf_config, write_hf_weights)  # noqa: E402
from convert_tokenizer import (hf_tokenizer_ranks, load_ranks, merges_from_ranks,
                               write_hf_tokenizer, write_tiktoken)  # noqa: E402
from convert_onnx import write_onnx  # noqa: E402


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
    n_params = sum(int(np.prod(v)) for v in param_shapes(cfg).values())
    print("llmconvert: %s (%s, %d parameters) -> %s" % (src, cfg["arch"], n_params, out))
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
    made = not os.path.isdir(out)
    os.makedirs(out, exist_ok=True)
    try:  # the weights first: a corrupt tensor (checked as it streams) leaves nothing written
        write_hf_weights(out, cfg, tensors, src)
    except UserError:
        if made:
            shutil.rmtree(out, ignore_errors=True)
        raise
    eot = write_hf_tokenizer(out, tokens, pairs, cfg["seq_len"]) if tokens is not None else None
    write_hf_config(out, cfg, eot)
    print("llmconvert: %s (%s) -> %s (config.json, model.safetensors)" % (src, cfg["arch"], out))
    print("llmconvert: tokenizer: %s" % ("%s -> vocab.json, merges.txt, tokenizer.json" % tok_path if tokens else "none (%s)" % why))


def to_onnx(src, out):
    if os.path.isdir(src):
        cfg, tensors, _ = read_hf(src)
    else:
        cfg, tensors, _ = read_hdf5(src)
    write_onnx(out, cfg, load_all(tensors))  # an ONNX graph is one protobuf: the whole model
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
