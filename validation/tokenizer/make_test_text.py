"""make_test_text.py — generated inputs for the tokenizer tests (deterministic for a seed).

usage: make_test_text.py fuzz SEED N_DOCS OUT   documents of random pieces (letters, digits,
                                                contractions, odd whitespace, emoji, invalid
                                                UTF-8, raw random bytes) joined by SEPARATOR
       make_test_text.py codepoints OUT         every Unicode scalar value once, in contexts
                                                (letter, digit, space, apostrophe, newline)
The separator never occurs inside a fuzz document; llmprep reads it as --doc-separator."""
import random
import sys

SEPARATOR = b"\x1e\x1e\x1e"
SEPARATOR_ARG = r"\x1e\x1e\x1e"

PIECES = [b" ", b"  ", b"   ", b"\t", b"\n", b"\n\n", b"\r\n", b"\r", b"\x0b", b"\x0c", b"'", b"'s",
          b"'ll", b"'re", b"'t", b"'d", b"'m", b"'ve", b"'S", b"a", b"Z", b"the", b" and", b"7",
          b"42", b"3.14", b".", b"!", b"-", b"_", b"...", b"<|endoftext|>", b"\x00", b"\x1b",
          "é".encode(), "ß".encode(), "中文".encode(), "日本".encode(), "😀".encode(),
          "👩‍💻".encode(), "\u00a0".encode(), "\u3000".encode(), "\u2028".encode(),
          "\u0085".encode(), "\u180e".encode(), "\u200b".encode(), "١٢".encode(), "½".encode(),
          "\u0301".encode(), "Ω".encode(), "д".encode(), "ก".encode(), "한".encode(),
          b"\x80", b"\xbf", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80",
          b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf"]


def fuzz(seed, n_docs):
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        if rng.random() < 0.15:  # raw random bytes
            doc = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 60)))
        else:
            doc = b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 60)))
        docs.append(doc.replace(b"\x1e", b"\x1f"))
    return SEPARATOR.join(docs)


def codepoints():
    """Skipped: surrogates, and characters assigned after the Unicode version of this Python
    (3.11: Unicode 14, like PCRE2 10.42), which PCRE2 of the same vintage sees as unassigned
    while tiktoken's newer tables may call them letters (see src/io/tokenizer.h)."""
    import unicodedata
    import regex  # installed beside tiktoken; its tables are recent
    ctx = [" ", "a", "1", "'", "\n", ".", "  ", "é"]
    parts, skipped = [], 0
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        if unicodedata.category(chr(c)) == "Cn" and not regex.match(r"\p{Cn}", chr(c)):
            skipped += 1
            continue
        parts.append(chr(c) + ctx[c % 8] + chr(c) + ("'ll" if c % 2 else " a"))
        if c % 16 == 15:
            parts.append(" " + chr(c) + chr(c) + "x")
    print(f"code points: {skipped} assigned after Unicode {unicodedata.unidata_version} skipped")
    return "".join(parts).encode("utf-8")


if __name__ == "__main__":
    if sys.argv[1] == "fuzz":
        data = fuzz(int(sys.argv[2]), int(sys.argv[3]))
    else:
        data = codepoints()
    with open(sys.argv[-1], "wb") as f:
        f.write(data)
