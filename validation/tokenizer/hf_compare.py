"""hf_compare.py — llmprep's output against the reference library, document by document.

usage: hf_compare.py KIND TOKENIZER OUT_DIR FILES...

KIND: json (a tokenizer.json through the `tokenizers` library), spm (a SentencePiece .model
through the sentencepiece library's own encoder), llama (the .model through transformers'
LlamaTokenizerFast, converted from it, when transformers is there). Each file is a document,
encoded as text (special tokens in the text are text: encode_special_tokens); the expected
stream is, per document, the document token then the library's ids (no BOS/EOS added). Checks
the shards as compare_shards.py does; prints the first difference; exit 1 on any."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def encoder(kind, path):
    """(encode(text) -> ids, the document token's id, id -> piece for messages)"""
    if kind == "json":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)
        tok.encode_special_tokens = True
        post = json.load(open(path))["post_processor"]
        doc = post["single"][0]["SpecialToken"]["id"]
        return (lambda s: tok.encode(s, add_special_tokens=False).ids, tok.token_to_id(doc),
                tok.id_to_token)
    import sentencepiece as S
    sp = S.SentencePieceProcessor(model_file=path)
    if kind == "spm":
        return (lambda s: sp.encode(s), sp.bos_id(), sp.id_to_piece)
    from transformers import LlamaTokenizerFast
    fast = LlamaTokenizerFast(vocab_file=path, legacy=True, add_bos_token=False,
                              add_eos_token=False)
    return (lambda s: fast.encode(s, add_special_tokens=False), fast.bos_token_id,
            fast.convert_ids_to_tokens)


def main():
    kind, path, out_dir, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    encode, doc_id, piece = encoder(kind, path)
    # after the libraries: tiktoken_ref (through compare_shards) puts .deps/python first on sys.path
    from compare_shards import read_stream
    ids, manifest = read_stream(out_dir)
    assert manifest["eot_token"] == doc_id, f"manifest eot_token {manifest['eot_token']}"
    pos = 0
    for n, f in enumerate(files):
        ref = encode(open(f, "rb").read().decode("utf-8"))
        got = ids[pos + 1:pos + 1 + len(ref)]
        if ids[pos] != doc_id or got != ref or (pos + 1 + len(ref) < len(ids) and
                                                ids[pos + 1 + len(ref)] != doc_id):
            k = next((i for i in range(min(len(got), len(ref))) if got[i] != ref[i]), len(ref))
            print(f"FAIL: {f} (document {n}, token {pos}): first difference at id {k}")
            print("  llmprep:", [piece(i) for i in ids[pos + 1 + max(0, k - 3):pos + 1 + k + 5]])
            print("  library:", [piece(i) for i in ref[max(0, k - 3):k + 5]])
            return 1
        pos += 1 + len(ref)
    if pos != len(ids):
        print(f"FAIL: {len(ids) - pos} tokens left after the last document")
        return 1
    print(f"ok  {kind}: {len(files)} documents, {len(ids)} ids identical to the library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
