"""check_trained_vocab.py — a trained rank file is a well-formed byte-level BPE vocabulary.

usage: check_trained_vocab.py VOCAB N_IDS TEXT_FILES...
Checks: ranks 0..255 are the single bytes in byte order; every later token is the concatenation
of two tokens of lower rank (a merge that training could make), no token repeats; the file holds
N_IDS - 1 ranks (N_IDS counts <|endoftext|>); tiktoken built from the file round-trips every
text exactly and compresses it (more than 2 bytes per token on these texts)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tiktoken_ref as R  # noqa: E402


def main():
    vocab, n_ids, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ranks = R.load_ranks(vocab)
    by_rank = sorted(ranks, key=ranks.get)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks are not 0..n-1"
    assert len(ranks) == n_ids - 1, f"{len(ranks)} ranks, expected {n_ids - 1}"
    assert by_rank[:256] == [bytes([b]) for b in range(256)], "ranks 0..255 are not the bytes"
    for r in range(256, len(by_rank)):
        tok = by_rank[r]
        if not any(ranks.get(tok[:k], r) < r and ranks.get(tok[k:], r) < r
                   for k in range(1, len(tok))):
            print(f"FAIL: rank {r} {tok!r} is not two lower-ranked tokens joined")
            return 1
    enc = R.encoding(vocab)
    n_bytes = n_tokens = 0
    for path in files:
        data = open(path, "rb").read()
        ids = R.encode_bytes(enc, data)
        if enc.decode_bytes(ids) != data:
            print(f"FAIL: {path}: tiktoken with the trained vocabulary does not round-trip")
            return 1
        n_bytes, n_tokens = n_bytes + len(data), n_tokens + len(ids)
    ratio = n_bytes / n_tokens
    print(f"ok: {len(ranks)} ranks, each a merge of two earlier ones; {ratio:.2f} bytes per token")
    return 0 if ratio > 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
