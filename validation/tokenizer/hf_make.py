"""hf_make.py — trains small tokenizers of the real families for the tokenizer.json tests.

usage: hf_make.py bpe FAMILY OUT.json TEXT...   byte-level BPE with the `tokenizers` library
       hf_make.py spm OUT_PREFIX TEXT...         SentencePiece BPE (Llama 2's options)
       hf_make.py unigram OUT_PREFIX TEXT...     SentencePiece unigram, NFKC (T5's kind)
       hf_make.py bad KIND OUT.json              a tokenizer.json llmtrain must refuse
       hf_make.py texts DIR N                    mixed.txt and N short fuzz documents in DIR

FAMILY is llama3 (GPT-4's too), qwen2 or gpt4o: the pre-tokenizer regex of that family, as its
published tokenizer.json holds it (Sequence [Split (Regex, Isolated), ByteLevel (use_regex
false)]), with <|begin_of_text|> as the document token (TemplateProcessing), special tokens and
a non-special added token. The vocabulary is trained on TEXT (about 1000 ids: a few seconds)."""
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
PATTERNS = {"llama3": LLAMA3, "qwen2": QWEN2, "gpt4o": GPT4O}
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|eot_id|>"]
ADDED = ["<tool_call>"]


def bpe(family, out, texts, vocab_size=1000):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, \
        trainers, AddedToken
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERNS[family]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(texts, trainer)
    tok.add_tokens([AddedToken(a, special=False, normalized=False) for a in ADDED])
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
          "<|eot_id|>", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0301", "\u0416\u0436"]
MIXED = ("Hello, world! Grüße aus Köln; 東京は晴れ。 Привет, мир! مرحبا 👋🏽🎉\r\n"
         "def f(x):\r\n\treturn x  *  2   # doubled\r\n\r\n\r\n"
         "    int main(void) { return 0; }\t\t\n"
         "tabs\t\tand   spaces   \n\n  <tool_call>{\"name\": \"f\"}</tool_call> <|eot_id|> "
         "it's WE'LL 12345678 3.14159\u00a0\u3000end   \n")


def texts(out_dir, n):
    import random
    r = random.Random(5)
    open(f"{out_dir}/mixed.txt", "w", newline="").write(MIXED)
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
