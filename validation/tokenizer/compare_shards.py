"""compare_shards.py — llmprep's output against tiktoken, document by document.

usage: compare_shards.py VOCAB OUT_DIR [--sep C-ESCAPED] FILES...

Reads OUT_DIR/val_*.bin then OUT_DIR/train_*.bin (the global token order), checks each shard's
header, size and the sha256 and count in OUT_DIR/manifest.json, splits the stream where
<|endoftext|> starts a document, and checks for every document of FILES (a file is a document,
or the documents between separators; empty ones skipped):
  - the ids equal tiktoken's (tiktoken_ref.encode_bytes: encode_ordinary on valid UTF-8),
  - decoding the ids with the rank file gives the document's bytes back exactly.
Prints the first difference with the tokens around it; exit 1 on any."""
import glob
import hashlib
import json
import os
import struct
import sys
from array import array

sys.path.insert(0, os.path.dirname(__file__))
import tiktoken_ref as R  # noqa: E402


def read_stream(out_dir):
    manifest = json.load(open(os.path.join(out_dir, "manifest.json")))
    want = {s["file"]: s for s in manifest["shards"]}
    names = sorted(glob.glob(os.path.join(out_dir, "val_*.bin"))) + \
        sorted(glob.glob(os.path.join(out_dir, "train_*.bin")))
    assert [os.path.basename(n) for n in names] == [s["file"] for s in manifest["shards"]], \
        f"shard files {names} differ from the manifest's list"
    ids = array("H")
    for name in names:
        data = open(name, "rb").read()
        magic, version, count = struct.unpack("<3i", data[:12])
        assert (magic, version) == (20240520, 1), f"{name}: header {magic} {version}"
        assert len(data) == 1024 + 2 * count, f"{name}: {len(data)} bytes for {count} tokens"
        entry = want[os.path.basename(name)]
        assert entry["tokens"] == count, f"{name}: manifest says {entry['tokens']}, file {count}"
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), f"{name}: sha256 differs"
        ids.frombytes(data[1024:])
    assert manifest["total_tokens"] == len(ids), "manifest total_tokens"
    return list(ids), manifest


def documents(files, sep):
    for path in files:
        data = open(path, "rb").read()
        for doc in (data.split(sep) if sep else [data]):
            if doc:
                yield path, doc


def show(table, ids):
    return [table[i] for i in ids]


def main():
    vocab, out_dir = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    sep = None
    if args[0] == "--sep":
        sep = args[1].encode().decode("unicode_escape").encode("latin-1")
        args = args[2:]
    enc, table = R.encoding(vocab), R.ranks_by_id(vocab)
    eot = enc.eot_token
    ids, manifest = read_stream(out_dir)
    assert manifest["eot_token"] == eot, "manifest eot_token"
    pos, n_docs = 0, 0
    for path, doc in documents(args, sep):
        ref = R.encode_bytes(enc, doc)
        got = ids[pos + 1:pos + 1 + len(ref)]
        if ids[pos] != eot or got != ref or (pos + 1 + len(ref) < len(ids) and
                                             ids[pos + 1 + len(ref)] != eot):
            k = next((i for i in range(min(len(got), len(ref))) if got[i] != ref[i]), len(ref))
            print(f"FAIL: {path} document {n_docs} (token {pos}): first difference at id {k}")
            print("  ours:    ", show(table, ids[pos + 1 + max(0, k - 3):pos + 1 + k + 5]))
            print("  tiktoken:", show(table, ref[max(0, k - 3):k + 5]))
            return 1
        if R.decode_bytes(table, got) != doc:
            print(f"FAIL: {path} document {n_docs}: decode(ids) differs from the text")
            return 1
        pos += 1 + len(ref)
        n_docs += 1
    if pos != len(ids):
        print(f"FAIL: {len(ids) - pos} tokens left after the last document")
        return 1
    print(f"ok: {n_docs} documents, {len(ids)} tokens identical to tiktoken; decode exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
