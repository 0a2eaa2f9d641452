"""tiktoken_to_hf.py — write a tiktoken rank file as Hugging Face GPT-2 files (vocab.json and
merges.txt in GPT-2's bytes_to_unicode alphabet), to test that the tokenizer reads both formats
alike. usage: tiktoken_to_hf.py RANK_FILE OUT_DIR
The merge of rank r is found the way it was made: BPE of the token's bytes with the ranks below
r must stop at exactly two parts."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tiktoken_ref as R  # noqa: E402


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def split_of(token, rank, ranks):
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = min(range(len(parts) - 1),
                   key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 30))
        if ranks.get(parts[best] + parts[best + 1], 1 << 30) >= rank:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    assert len(parts) == 2, f"rank {rank} {token!r} is not a merge of two lower ranks"
    return parts


def main():
    ranks = R.load_ranks(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    b2u = bytes_to_unicode()
    show = lambda tok: "".join(b2u[b] for b in tok)  # noqa: E731
    by_rank = sorted(ranks, key=ranks.get)
    vocab = {show(tok): r for r, tok in enumerate(by_rank)}
    vocab[R.EOT] = len(by_rank)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for r in range(256, len(by_rank)):
            a, b = split_of(by_rank[r], r, ranks)
            f.write(f"{show(a)} {show(b)}\n")


if __name__ == "__main__":
    main()
