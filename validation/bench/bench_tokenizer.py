"""bench_tokenizer.py — tiktoken's encoding throughput on one thread, the counterpart of
bench_tokenizer.c. usage: bench_tokenizer.py VOCAB TEXT [REPEATS]
tiktoken's Encoding is built from the same rank file with GPT-2's pattern; the text is decoded as
UTF-8 (the bench text is valid UTF-8). One string: encode_ordinary(text); per document (split
at blank lines): encode_ordinary_batch(docs, num_threads=1). Best of REPEATS (default 5)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tokenizer"))
import tiktoken_ref as R  # noqa: E402


def best_time(fn, repeats):
    best, out = 1e30, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    vocab, path = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    data = open(path, "rb").read()
    text = data.decode("utf-8")
    enc = R.encoding(vocab)
    docs, s = [], 0
    while s < len(text):
        e = text.find("\n\n", s)
        e = len(text) if e < 0 else e + 2
        docs.append(text[s:e])
        s = e
    runs = [("one-string", lambda: enc.encode_ordinary(text)),
            ("per-doc", lambda: [i for d in enc.encode_ordinary_batch(docs, num_threads=1) for i in d])]
    for name, fn in runs:
        dt, ids = best_time(fn, repeats)
        h = 0
        for i in ids:
            h = (h * 1000003 + i) & 0xFFFFFFFFFFFFFFFF
        print(f"tiktoken {name:<10} {len(data) / dt / 1e6:8.1f} MB/s  {len(ids)} tokens  hash {h:016x}")


if __name__ == "__main__":
    main()
