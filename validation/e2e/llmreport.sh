#!/usr/bin/env bash
# llmreport: (1) two tiny trainings (lr 3e-3 and 1e-3): the Markdown comparison names train.lr
# as the differing key with both values, and its final train / validation losses are exactly the
# last values in each metrics.jsonl (read here with json, independently); every plot is a PNG
# (signature, IHDR with nonzero width and height); the HTML report embeds the same number of
# PNGs. (2) synthesized run directories: a resumed run (steps 6-7 written twice, the first
# attempt's step 8 stale, a torn last line, no run.json, no checkpoint) shows steps 1-7 once
# each, with their last values; a restart record
# drops the steps after from_step; energy members and an anomaly event appear; a trace.json's
# busy / idle per rank equals the union of its intervals computed by hand (to 0.5 ms). (3) a
# missing directory and one without metrics.jsonl: exit 2, the path named.
source "$(dirname "$0")/lib.bash"
T=$TEST_DIR
$PYTHON -c "import matplotlib, numpy" 2>/dev/null ||
    { echo "SKIP: matplotlib or numpy not importable by $PYTHON (Debian: python3-matplotlib)"; exit 77; }
[ -x ./llmreport ] || make -s llmreport

for run in a:3e-3 b:1e-3; do
    write_tiny_nml "$T/${run%%:*}.nml" name="${run%%:*}" lr="${run#*:}" max_steps=12 val_every=6
    $MPIRUN -np 1 ./llmtrain "$T/${run%%:*}.nml" >"$T/${run%%:*}.log" 2>&1 ||
        { tail -20 "$T/${run%%:*}.log"; fail "training ${run%%:*} failed"; }
done
./llmreport "$T/a" "$T/b" --out "$T/cmp.md" >"$T/cmp.log" 2>&1 || { cat "$T/cmp.log"; fail "llmreport exited $?"; }
./llmreport "$T/a" "$T/b" --out "$T/cmp.html" >>"$T/cmp.log" 2>&1 || { cat "$T/cmp.log"; fail "llmreport (html) exited $?"; }
cat "$T/cmp.log"

# Checks the reports against the metrics files. Markdown tables are read row by row; a loss in
# them must equal the metrics value exactly (llmreport prints the shortest round-trip form).
$PYTHON - "$T" <<'PY' || fail "report of two trainings"
import base64, glob, json, os, re, struct, sys
T = sys.argv[1]

def last(path, key):
    v = None
    for line in open(path):
        r = json.loads(line)
        if key in r:
            v = r[key]
    return v

def table_rows(md, first_header):
    """Rows (lists of cells) of the Markdown table whose header starts with first_header."""
    lines, rows, on = md.splitlines(), [], False
    for ln in lines:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")] if ln.startswith("|") else None
        if cells and cells[0] == first_header and not on:
            on, head = True, cells
            continue
        if on and cells is None:
            break
        if on and not set(ln) <= set("|-"):
            rows.append(dict(zip(head, cells)))
    return rows

def png_ok(data, what):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "%s: no PNG signature" % what
    assert data[12:16] == b"IHDR", "%s: no IHDR chunk" % what
    w, h = struct.unpack(">II", data[16:24])
    assert w > 0 and h > 0, "%s: %dx%d" % (what, w, h)

md = open(os.path.join(T, "cmp.md")).read()
cmp = {r["run"]: r for r in table_rows(md, "run")}
for run in ("a", "b"):
    m = os.path.join(T, run, "metrics.jsonl")
    want_loss, want_val = last(m, "loss"), last(m, "val_loss")
    got_loss, got_val = float(cmp[run]["final loss"]), float(cmp[run]["final val loss"])
    assert got_loss == want_loss, "run %s: final loss %r in the report, %r in %s" % (run, got_loss, want_loss, m)
    assert got_val == want_val, "run %s: final val loss %r in the report, %r in %s" % (run, got_val, want_val, m)
    print("ok  run %s: final loss %r, val %r as in metrics.jsonl" % (run, got_loss, got_val))
diff = {r["key"]: r for r in table_rows(md, "key")}
assert "train.lr" in diff, "train.lr not among the differing keys: %s" % sorted(diff)
assert float(diff["train.lr"]["a"]) == 3e-3 and float(diff["train.lr"]["b"]) == 1e-3, diff["train.lr"]
assert "model.d_model" not in diff, "a key that does not differ is listed"
print("ok  differing keys: %s" % ", ".join(sorted(diff)))
links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
assert len(links) >= 8, "only %d plots in cmp.md" % len(links)
for rel in links:
    path = os.path.join(T, rel)
    data = open(path, "rb").read()
    png_ok(data, path)
pngs = glob.glob(os.path.join(T, "cmp_files", "**", "*.png"), recursive=True)
assert len(pngs) == len(links), "%d PNG files, %d linked" % (len(pngs), len(links))
page = open(os.path.join(T, "cmp.html")).read()
embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
assert len(embedded) == len(links), "%d images embedded in cmp.html, %d in cmp.md" % (len(embedded), len(links))
for i, b in enumerate(embedded):
    png_ok(base64.b64decode(b), "cmp.html image %d" % i)
assert "<img" in page and "src=\"cmp_files" not in page, "cmp.html links files instead of embedding them"
print("ok  %d PNG plots valid, the same %d embedded in cmp.html" % (len(links), len(embedded)))
PY

# (2) Synthesized run directories. resumed: steps 1-8 (validation at 4 and 8), then a resume
# from step 5 that wrote 6-7 again (other losses) and a torn line: steps 1-7, the second 6-7,
# validation at 4 only. restarted: steps 1-6 and an anomaly event, then
# {"event":"restart","from_step":3} and steps 4-5 again: step 6 of the first attempt is gone.
mkdir -p "$T/resumed" "$T/restarted"
$PYTHON - "$T" <<'PY'
import json, os, sys
T = sys.argv[1]
def step(s, loss, **kw):
    r = {"step": s, "loss": loss, "lr": 1e-3, "grad_norm": 0.5, "ms": 100.0, "tokens_per_s": 1000.0 + s,
         "mfu": 0.1, "rss_mib": 50.0, "peak_mib": 60.0, "tokens": 100 * s, "skipped": 0, "applied": True,
         "ms_tp": 10.0, "ms_pp_wait": 20.0, "ms_dp_wait": 5.0}
    r.update(kw)
    return json.dumps(r)
with open(os.path.join(T, "resumed", "metrics.jsonl"), "w") as f:
    for s in range(1, 9):
        f.write(step(s, 5.0 - 0.1 * s, energy_j=2.0) + "\n")
        if s in (4, 8):
            f.write(json.dumps({"step": s, "val_loss": 5.0 - 0.05 * s}) + "\n")
    for s in range(6, 8):
        f.write(step(s, 3.0 - 0.1 * s, energy_j=2.0) + "\n")
    f.write('{"step":8,"loss":2.1,"lr":')  # torn: the run was killed mid-line
with open(os.path.join(T, "restarted", "metrics.jsonl"), "w") as f:
    for s in range(1, 7):
        f.write(step(s, 4.0 - 0.1 * s) + "\n")
    f.write(json.dumps({"step": 6, "event": "anomaly", "kind": "loss_spike", "value": 9.5}) + "\n")
    f.write(json.dumps({"event": "restart", "from_step": 3}) + "\n")
    for s in range(4, 6):
        f.write(step(s, 1.0 - 0.1 * s) + "\n")
# Two ranks: rank 0 busy [0,100] and [50,150] ms (overlapping: 150 ms busy), a B/E pair
# [200,250] ms; rank 1 one event [0,40] ms. The span is 0..250 ms.
ev = [{"name": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 100000},
      {"name": "dp_wait", "ph": "X", "pid": 0, "tid": 1, "ts": 50000, "dur": 100000},
      {"name": "backward", "ph": "B", "pid": 0, "tid": 0, "ts": 200000},
      {"name": "backward", "ph": "E", "pid": 0, "tid": 0, "ts": 250000},
      {"name": "forward", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 40000}]
with open(os.path.join(T, "restarted", "trace.json"), "w") as f:
    f.write("[" + ",\n".join(json.dumps(e) for e in ev) + ",\n")  # unclosed, as a killed tracer leaves it
with open(os.path.join(T, "restarted", "run.json"), "w") as f:
    json.dump({"commit": "abc123", "hosts": ["n1", "n2"], "namelist": {"train": {"lr": 0.002}}}, f)
PY
./llmreport "$T/resumed" "$T/restarted" --out "$T/synth.md" >"$T/synth.log" 2>&1 ||
    { cat "$T/synth.log"; fail "llmreport on synthesized runs exited $?"; }
$PYTHON - "$T/synth.md" <<'PY' || fail "report of synthesized runs (see $T/synth.md)"
import re, sys
md = open(sys.argv[1]).read()
def row(label, section):
    part = md.split("## Run " + section, 1)[1].split("\n## ", 1)[0]
    m = re.search(r"^\| %s \| ([^|]*) \|" % re.escape(label), part, re.M)
    assert m, "no row %r in section %s" % (label, section)
    return m.group(1).strip()
checks = [("resumed", "steps", "7"), ("resumed", "final train loss", repr(3.0 - 0.1 * 7)),
          ("resumed", "final validation loss", repr(5.0 - 0.05 * 4) + " (step 4)"),
          ("resumed", "energy_j (sum over steps)", "14.0000"),
          ("resumed", "mean ms_pp_wait per step", "20.00 ms"), ("resumed", "namelist from", "(none found)"),
          ("restarted", "steps", "5"), ("restarted", "final train loss", repr(1.0 - 0.1 * 5)),
          ("restarted", "run.json: commit", "abc123"), ("restarted", "run.json: hosts", "n1, n2"),
          ("restarted", "namelist from", "run.json")]
for section, label, want in checks:
    got = row(label, section)
    assert got == want, "%s: %s is %r, expected %r" % (section, label, got, want)
assert re.search(r"^\| 6 \| anomaly \| .*loss_spike", md, re.M), "the anomaly event is not listed"
assert "not JSON records" in md and "superseded" in md, "the torn line / superseded records are not reported"
# the trace: rank 0 busy 150 + 50 = 200 ms of 250, rank 1 40 ms (printed to 0.1 ms below 100 ms,
# to 1 ms above: tolerance 0.5 ms)
for rank, busy, idle in ((0, 200.0, 50.0), (1, 40.0, 210.0)):
    m = re.search(r"^\| %d \| \d+ \| ([\d.]+) \| ([\d.]+) \|" % rank, md, re.M)
    assert m and abs(float(m.group(1)) - busy) <= 0.5 and abs(float(m.group(2)) - idle) <= 0.5, \
        "trace rank %d: %s, expected busy %s idle %s" % (rank, m.groups() if m else None, busy, idle)
m = re.search(r"^\| forward \| 2 \| ([\d.]+) \|", md, re.M)
assert m and abs(float(m.group(1)) - 140.0) <= 0.5, "trace: forward should total 140 ms over 2 events"
print("ok  synthesized runs: last occurrence of each step, restart, torn line, energy, events, run.json, trace")
PY

# (3) bad input: exit 2 and the path named
for bad in "$T/no_such_dir" "$T/a.nml" "$T/cmp_files"; do
    ./llmreport "$T/a" "$bad" --out "$T/bad.md" >"$T/bad.log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || { cat "$T/bad.log"; fail "llmreport $bad: exit $rc, expected 2"; }
    grep -qF "$bad" "$T/bad.log" || { cat "$T/bad.log"; fail "the message does not name $bad"; }
    echo "ok  $(cat "$T/bad.log")"
done
[ ! -e "$T/bad.md" ] || fail "a report was written despite the bad input"
echo "PASS"
