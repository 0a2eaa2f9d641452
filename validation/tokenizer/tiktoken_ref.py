r"""tiktoken_ref.py — the reference the tokenizer tests compare llmtrain's tokenizer against.

tiktoken's Encoding is built directly from a rank file (nothing is downloaded at run time) with
GPT-2's original pattern and <|endoftext|> = number of ranks.

Invalid UTF-8: tiktoken's public API takes `str`, so it cannot see invalid bytes at all (a str
with lone surrogates, e.g. from errors="surrogateescape", is silently turned into U+FFFD by
encode/encode_ordinary: lossy), and its private `_encode_bytes` encodes the valid prefix, then
BPE-merges the last piece together with everything after the first invalid byte as one piece,
without the regex (b"abc \xe2\x82 def" -> "abc", " \xe2", "\x82", " def"), which is no split
rule for text that goes on. So the reference for bytes is defined here, and it is what
llmtrain's tokenizer promises (tokenizer.h):
    split the bytes into maximal valid-UTF-8 runs and maximal invalid runs (exactly the split
    Python's decoder makes with errors="surrogateescape"); each valid run is encoded with
    tiktoken's encode_ordinary on its own; each invalid run is one piece, BPE-merged with
    tiktoken's _encode_single_piece.
For valid UTF-8 this is plain encode_ordinary. It matches PCRE2_MATCH_INVALID_UTF, where an
invalid sequence is a barrier no match crosses and lookarounds see it as the end of the text."""
import base64
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".deps", "python"))
import tiktoken  # noqa: E402

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def load_ranks(path):
    """tiktoken's rank file: one 'base64(token) rank' per line."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def encoding(path):
    ranks = load_ranks(path)
    return tiktoken.Encoding(name=os.path.basename(path), pat_str=GPT2_PATTERN,
                             mergeable_ranks=ranks, special_tokens={EOT: len(ranks)})


def utf8_runs(data):
    """Maximal (valid, bytes) runs of `data`, valid=True for well-formed UTF-8."""
    text = data.decode("utf-8", "surrogateescape")
    runs, cur, cur_valid = [], [], None
    for ch in text:
        valid = not ("\udc80" <= ch <= "\udcff")
        if valid != cur_valid and cur:
            runs.append((cur_valid, "".join(cur).encode("utf-8", "surrogateescape")))
            cur = []
        cur_valid = valid
        cur.append(ch)
    if cur:
        runs.append((cur_valid, "".join(cur).encode("utf-8", "surrogateescape")))
    return runs


def encode_bytes(enc, data):
    """The reference token ids of arbitrary bytes (see the module comment)."""
    ids = []
    for valid, run in utf8_runs(data):
        if valid:
            ids += enc.encode_ordinary(run.decode("utf-8"))
        else:
            ids += enc._encode_single_piece(run)
    return ids


def decode_bytes(ranks_by_id, ids):
    return b"".join(ranks_by_id[i] for i in ids)


def ranks_by_id(path):
    ranks = load_ranks(path)
    table = [b""] * (len(ranks) + 1)
    for tok, rank in ranks.items():
        table[rank] = tok
    table[len(ranks)] = EOT.encode()
    return table
