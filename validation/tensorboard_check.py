#!/usr/bin/env python3
"""tensorboard_check.py — llmtrain's TensorBoard events against its metrics.jsonl, read with the
real reader (tensorboard's EventAccumulator) and with an independent framing/CRC check.

usage: tensorboard_check.py RUN_DIR

Checks (tolerance: exact after rounding the JSONL number to float32, which is what an Event's
simple_value holds; strings exactly):
  1. framing: every record of the event file has a correct length, masked CRC-32C of the length
     and masked CRC-32C of the data (CRC computed here, bitwise, not by tensorboard), the file
     ends at a record boundary, and the first Event is file_version "brain.Event:2";
  2. mirror: for every metrics record with a "step", every number and true/false is a scalar
     with that tag at that step, every string (and array) a text tensor; null is absent; and
     TensorBoard holds no scalar or text that the JSONL does not (counts per tag equal);
  3. torn last record: the file cut inside a record (in its header, and in its data) still
     gives every earlier record through EventAccumulator, and nothing of the torn one.
Exit 0 when all hold; 1 with the values that differ; 77 when tensorboard is not importable.
"""
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.compat.proto import event_pb2
except ImportError as e:  # the caller (validation/e2e) turns 77 into a skip
    print("SKIP: tensorboard's EventAccumulator is not importable (%s); run validation/deps.sh" % e)
    sys.exit(77)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """[(offset, length, event bytes)]; raises on a bad length, CRC or a torn end."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("torn record header at byte %d" % pos)
        n, hcrc = struct.unpack_from("<QI", data, pos)
        if masked(crc32c(data[pos:pos + 8])) != hcrc:
            raise ValueError("length CRC wrong at byte %d: stored %08x, computed %08x" % (pos, hcrc, masked(crc32c(data[pos:pos + 8]))))
        if pos + 16 + n > len(data):
            raise ValueError("torn record data at byte %d" % pos)
        body = data[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, pos + 12 + n)
        if masked(crc32c(body)) != dcrc:
            raise ValueError("data CRC wrong at byte %d: stored %08x, computed %08x" % (pos, dcrc, masked(crc32c(body))))
        out.append((pos, n, body))
        pos += 16 + n
    return out


def expected_values(metrics_path):
    """{(tag, step): ('scalar', float32) | ('text', str)} from the JSONL, in the writer's rules."""
    want = {}
    for line in open(metrics_path):
        rec = json.loads(line)
        if not isinstance(rec.get("step"), (int, float)) or isinstance(rec.get("step"), bool):
            continue
        kind = rec.get("kind") if isinstance(rec.get("kind"), str) else None
        step = int(rec["step"])
        for k, v in rec.items():
            if k == "step" or (k == "kind" and kind is not None) or v is None:
                continue
            tag = "%s/%s" % (kind, k) if kind else k
            if isinstance(v, bool) or isinstance(v, (int, float)):
                val = ("scalar", float(np.float32(float(v))))
            elif isinstance(v, str):
                val = ("text", v)
            else:  # arrays and objects: their JSON text as the writer copied it
                val = ("text", json.dumps(v, separators=(",", ":")))
            want.setdefault((tag, step), []).append(val)
    return want


def load(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    got = {}
    tags = acc.Tags()
    for tag in tags["scalars"]:
        for e in acc.Scalars(tag):
            got.setdefault((tag, e.step), []).append(("scalar", float(np.float32(e.value))))
    for tag in tags["tensors"]:
        for e in acc.Tensors(tag):
            got.setdefault((tag, e.step), []).append(("text", e.tensor_proto.string_val[0].decode("utf-8")))
    return got


def compare(want, got, what):
    bad = []
    for key in sorted(set(want) | set(got)):
        if sorted(want.get(key, [])) != sorted(got.get(key, [])):
            bad.append("  %s step %d: metrics.jsonl %s, TensorBoard %s" % (key[0], key[1], want.get(key), got.get(key)))
    if bad:
        print("FAIL (%s): %d (tag, step) pairs differ:" % (what, len(bad)))
        print("\n".join(bad[:20]))
    return not bad


def check_torn(path, records, want_all):
    """Cut inside record k's header and inside its data: all records before k remain."""
    k = len(records) * 2 // 3
    off, n, body = records[k]
    ev = event_pb2.Event.FromString(body)
    cut_tags = {(v.tag, ev.step) for v in ev.summary.value}
    earlier = {}
    for (_, _, b) in records[1:k]:
        e = event_pb2.Event.FromString(b)
        for v in e.summary.value:
            earlier.setdefault((v.tag, e.step), 0)
    ok = True
    for where, cut in (("header", off + 5), ("data", off + 12 + n // 2)):
        tmp = tempfile.mkdtemp()
        try:
            dst = os.path.join(tmp, os.path.basename(path))
            with open(path, "rb") as src, open(dst, "wb") as out:
                out.write(src.read(cut))
            got = load(dst)
            missing = [key for key in earlier if key not in got]
            torn = [key for key in cut_tags if key not in earlier and key in got]
            if missing or torn:
                ok = False
                print("FAIL: cut in record %d's %s (byte %d): %d earlier values missing %s, %d of the torn record read %s" % (k, where, cut, len(missing), missing[:5], len(torn), torn[:5]))
            else:
                print("torn record %d of %d cut in its %s (byte %d): all %d earlier (tag, step) values read, none of the torn one" % (k, len(records), where, cut, len(earlier)))
        finally:
            shutil.rmtree(tmp)
    return ok


def main():
    run_dir = sys.argv[1]
    files = glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))
    if len(files) != 1:
        print("FAIL: expected one event file in %s/tb, found %s" % (run_dir, files))
        return 1
    path = files[0]
    try:
        records = read_records(path)
    except ValueError as e:
        print("FAIL: %s: %s" % (path, e))
        return 1
    first = event_pb2.Event.FromString(records[0][2])
    if first.file_version != "brain.Event:2":
        print("FAIL: first event's file_version is %r" % first.file_version)
        return 1
    print("framing: %d records, every length and CRC-32C right; first event file_version %s" % (len(records), first.file_version))
    want = expected_values(os.path.join(run_dir, "metrics.jsonl"))
    got = load(path)
    if not compare(want, got, "EventAccumulator vs metrics.jsonl"):
        return 1
    n_scalar = sum(1 for v in want.values() for x in v if x[0] == "scalar")
    n_text = sum(1 for v in want.values() for x in v if x[0] == "text")
    steps = sorted({s for (_, s) in want})
    print("mirror: %d scalars and %d texts at %d steps (%d..%d), all equal to metrics.jsonl (float32)" % (n_scalar, n_text, len(steps), steps[0], steps[-1]))
    return 0 if check_torn(path, records, want) else 1


if __name__ == "__main__":
    sys.exit(main())
