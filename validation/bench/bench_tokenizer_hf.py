"""bench_tokenizer_hf.py — the reference libraries' encoding throughput on one thread, the
counterpart of bench_tokenizer.c for a tokenizer.json (`tokenizers`, RAYON_NUM_THREADS=1) and a
SentencePiece model (sentencepiece). usage: bench_tokenizer_hf.py json|spm PATH TEXT [REPEATS]
One string: the whole text; per document (split at blank lines): the batch call. Special tokens
in the text are text (encode_special_tokens), as llmprep reads it. Best of REPEATS (default 5);
prints MB/s, the token count and the hash bench_tokenizer.c prints."""
import sys
import time


def main():
    kind, path, text_path = sys.argv[1], sys.argv[2], sys.argv[3]
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    data = open(text_path, "rb").read()
    text = data.decode("utf-8")
    docs, s = [], 0
    while s < len(text):
        e = text.find("\n\n", s)
        e = len(text) if e < 0 else e + 2
        docs.append(text[s:e])
        s = e
    if kind == "json":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        name = "tokenizers"
        one = lambda: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
        per = lambda: [i for e in tok.encode_batch(docs, add_special_tokens=False)  # noqa: E731
                       for i in e.ids]
    else:
        import sentencepiece as S
        sp = S.SentencePieceProcessor(model_file=path)
        name = "sentencepiece"
        one = lambda: sp.encode(text)  # noqa: E731
        per = lambda: [i for d in sp.encode(docs) for i in d]  # noqa: E731
    for mode, fn in (("one-string", one), ("per-doc", per)):
        best, ids = 1e30, None
        for _ in range(repeats):
            t0 = time.perf_counter()
            ids = fn()
            best = min(best, time.perf_counter() - t0)
        h = 0
        for i in ids:
            h = (h * 1000003 + i) & 0xFFFFFFFFFFFFFFFF
        print(f"{name} {mode:<10} {len(data) / best / 1e6:8.1f} MB/s  {len(ids)} tokens  hash {h:016x}")


if __name__ == "__main__":
    main()
