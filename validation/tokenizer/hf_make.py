"""hf_make.py — trains small tokenizers of the real families for the tokenizer.json tests.

usage: hf_make.py bpe FAMILY OUT.json TEXT...   byte-level BPE with the `tokenizers` library
       hf_make.py spm OUT_PREFIX TEXT...         SentencePiece BPE (Llama 2's options)
       hf_make.py unigram OUT_PREFIX TEXT...     SentencePiece unigram, NFKC (T5's kind)
       hf_make.py bad KIND OUT.json              a tokenizer.json llmtrain must refuse
       hf_make.py texts DIR N                    mixed.txt, nfc.txt, unicode.txt and N fuzz documents

FAMILY is llama3 (GPT-4's too), qwen2 or gpt4o: the pre-tokenizer regex of that family, as its
published tokenizer.json holds it (Sequence [Split (Regex, Isolated), ByteLevel (use_regex
false)]), with <|begin_of_text|> as the document token (TemplateProcessing), special tokens and
a non-special added token. qwen2nfc: qwen2 with Qwen 2's normalizer NFC, and two added tokens
that are `normalized` (matched after NFC, their content decomposed as written: "cafe\u0301!",
and "<tool_call>x", which the not-normalized <tool_call> found first always splits). The
vocabulary is trained on TEXT (about 1000 ids: a few seconds)."""
import json
import sys

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# GPT-4's (cl100k_base) is Llama 3's; GPT-4o's (o200k_base, as tiktoken holds it): case classes
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PATTERNS = {"llama3": LLAMA3, "qwen2": QWEN2, "qwen2nfc": QWEN2, "gpt4o": GPT4O}
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|eot_id|>"]
ADDED = ["<tool_call>"]
NORMALIZED = ["cafe\u0301!", "<tool_call>x"]


def bpe(family, out, texts, vocab_size=1000):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, \
        trainers, AddedToken, normalizers
    tok = Tokenizer(models.BPE())
    if family == "qwen2nfc":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERNS[family]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(texts, trainer)
    tok.add_tokens([AddedToken(a, special=False, normalized=False) for a in ADDED])
    if family == "qwen2nfc":
        tok.add_tokens([AddedToken(a, special=False, normalized=True) for a in NORMALIZED])
    bos = SPECIAL[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(out)


def spm(prefix, texts):
    import sentencepiece as S
    S.SentencePieceTrainer.train(
        input=",".join(texts), model_prefix=prefix, model_type="bpe", vocab_size=1500,
        character_coverage=0.9995, byte_fallback=True, split_digits=True,
        allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        user_defined_symbols=["<tool_call>"], minloglevel=2)


# pieces of the fuzz documents: every kind of white space (\r\n, tabs, \v, \f, NBSP, U+3000,
# U+2028, U+85, U+180E, zero-width space), letters in several scripts and cases, digit runs,
# contractions, punctuation, emoji with modifiers, a combining mark, the added and special tokens
PIECES = [" ", "  ", "\t", "\r", "\n", "\r\n", "\v", "\f", "\u00a0", "\u3000", "\u2028",
          "\u2029", "\u0085", "\u180e", "\u200b", "a", "Ab", "the", "x", "1", "123", "12345",
          "'s", "'LL", ".", "!!", "(", ")", "{", "}", ";", "\u00e9t\u00e9", "\u4e2d\u6587",
          "\U0001F600", "\U0001F44D\U0001F3FD", "\u0645\u0631\u062d\u0628\u0627", "<tool_call>",
          "<|eot_id|>", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0301", "\u0416\u0436",
          # for NFC: decomposed and composed forms, marks out of canonical order, Hangul jamo, a
          # singleton (Angstrom sign), composition exclusions (U+0958, U+1D15E), a line that
          # starts with a base and its mark (a cut point of llmprep), the normalized tokens
          "e\u0301", "A\u030a", "\u00c5", "\u212b", "a\u0316\u0301", "a\u0301\u0316",
          "e\u0302\u0301", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "\u0958",
          "\u0915\u093c", "\U0001d15e", "\u0344", "\u03b1\u0313\u0301", "\ne\u0301",
          "cafe\u0301!", "caf\u00e9!", "<tool_call>x"]
MIXED = ("Hello, world! Grüße aus Köln; 東京は晴れ。 Привет, мир! مرحبا 👋🏽🎉\r\n"
         "def f(x):\r\n\treturn x  *  2   # doubled\r\n\r\n\r\n"
         "    int main(void) { return 0; }\t\t\n"
         "tabs\t\tand   spaces   \n\n  <tool_call>{\"name\": \"f\"}</tool_call> <|eot_id|> "
         "it's WE'LL 12345678 3.14159\u00a0\u3000end   \n")


# NFC's cases in lines (llmprep cuts before a line's first ASCII letter): precomposed and
# decomposed Latin, Vietnamese (two marks), Greek polytonic, Hangul syllables as jamo (LV, LVT) and
# precomposed, marks in non-canonical order, a singleton, composition exclusions (Devanagari
# nukta, a musical symbol), a mark alone at a line's start, the normalized added tokens
NFC_TEXT = ("Cafe\u0301 cre\u0300me bru\u0302le\u0301e; caf\u00e9 cr\u00e8me br\u00fbl\u00e9e\n"
            "A\u030angstro\u0308m \u212b \u00c5ngstr\u00f6m, Zu\u0308rich, Ni\u00f1o, Nin\u0303o\n"
            "Vie\u0323\u0302t Nam: Tie\u0302\u0301ng Vie\u0323\u0302t, Ti\u1ebfng Vi\u1ec7t\n"
            "\u1112\u1161\u11ab\u1100\u1173\u11af \ud55c\uae00 \u1100\u1161 \u1100\u1161\u11a8\n"
            "\u03b1\u0313\u0301\u03bd\u03b8\u03c1\u03c9\u03c0\u03bf\u03c2 a\u0316\u0301 "
            "a\u0301\u0316 q\u0307\u0323\n"
            "\u0915\u093c\u0916\u093c \u0958 \U0001d15e \U0001d157\U0001d165 \u0344\n"
            "\u0301 starts a line; e\u0301\ne\u0301 again\r\nx\u0308 <tool_call>x cafe\u0301! "
            "caf\u00e9! <tool_call>cafe\u0301!\n")


def unicode_text():
    """every code point from U+0080 to U+1FFFF and the CJK compatibility supplement (not the
    surrogates, the private use area, the CJK ideographs, and only every 29th Hangul syllable:
    none of those composes with anything) alone, as Python's NFD, and after an "a" with two
    marks after it (U+0301, U+0316: out of canonical order), 16 to a line"""
    import unicodedata
    skip = [(0xD800, 0xE000), (0xE000, 0xF900), (0x3400, 0x4DC0), (0x4E00, 0xA000)]
    cps = [c for c in list(range(0x80, 0x20000)) + list(range(0x2F800, 0x2FA20))
           if not any(a <= c < b for a, b in skip) and not (0xAC00 <= c <= 0xD7A3 and c % 29)]
    out = []
    for i, c in enumerate(cps):
        s = chr(c)
        out.append(f"{s} {unicodedata.normalize('NFD', s)} a{s}\u0301\u0316" +
                   ("\n" if i % 16 == 15 else " "))
    return "".join(out)


def texts(out_dir, n):
    import random
    r = random.Random(5)
    open(f"{out_dir}/mixed.txt", "w", newline="").write(MIXED)
    open(f"{out_dir}/nfc.txt", "w", newline="").write(NFC_TEXT * 3)
    open(f"{out_dir}/unicode.txt", "w", newline="").write(unicode_text())
    for i in range(n):
        s = "".join(r.choice(PIECES) for _ in range(r.randint(1, 60)))
        open(f"{out_dir}/fuzz_{i:03d}.txt", "w", newline="").write(s)


def unigram(prefix, texts):
    import sentencepiece as S
    S.SentencePieceTrainer.train(
        input=",".join(texts), model_prefix=prefix, model_type="unigram", vocab_size=1200,
        character_coverage=0.9995, byte_fallback=True, normalization_rule_name="nmt_nfkc",
        minloglevel=2)


def bad(kind, out):
    if kind == "corrupt":
        open(out, "w").write('{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0')
        return
    if kind == "wordpiece":
        j = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
             "post_processor": None, "decoder": None,
             "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                       "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}}
    elif kind == "nfkc":  # a normalizer other than NFC
        j = {"version": "1.0", "added_tokens": [], "normalizer": {"type": "NFKC"},
             "pre_tokenizer": None, "post_processor": None, "decoder": None,
             "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    else:  # unigram
        j = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
             "post_processor": None, "decoder": None,
             "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}}
    json.dump(j, open(out, "w"))


if __name__ == "__main__":
    if sys.argv[1] == "bpe":
        bpe(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif sys.argv[1] == "spm":
        spm(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "unigram":
        unigram(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "texts":
        texts(sys.argv[2], int(sys.argv[3]))
    else:
        bad(sys.argv[2], sys.argv[3])
