"""convert_tokenizer — tokenizers for llmconvert: tiktoken rank files, GPT-2's vocab.json +
merges.txt and Hugging Face tokenizer.json (byte-level BPE), read and written.
Uses: convert_weights, convert_hf (read_json, write_json). Used by: llmconvert.
"""

import base64
import os

from convert_weights import (EOT_TEXT, need, replaced_when_done, UserError)
from convert_hf import (read_json, write_json)


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
    with replaced_when_done(path) as tmp, open(tmp, "wb") as f:
        for r, t in enumerate(tokens):
            f.write(base64.b64encode(t) + b" %d\n" % r)
