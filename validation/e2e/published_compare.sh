#!/usr/bin/env bash
# The table of the performance model against published runs (validation/bench/published_compare.py,
# docs/planning.md), its structure only, not its ratios (those are make bench's record):
#   on rows of inputs/published/ (GPT 1.7B on 32 A100, with --search 32; it, MT-NLG 530B on 2240
#   A100 and Llama 3 405B on 8192 H100, without): a header of 14 columns, one row per namelist with 14 cells, the published and
#   predicted step times positive and their ratio = published / predicted (1e-2 of the printed
#   digits), the search cell "#k / #k" or "no / ...", the summary line counting 3 rows;
#   the same published step recomputed here from the 1.7B row's figure (44% of A100's 312 TFLOP/s,
#   Narayanan et al. 2021 eq. 3) to 1e-2; a row counted in llmtrain's own model FLOPs (Llama 3
#   405B on 8192 H100, flops = llmtrain): its speed ratio = the predicted TFLOP/s / the published
#   430 (1e-2), its parameters 412.2B (128 layers of Llama 3's shape);
#   every namelist of inputs/published/ carries its !@ keys and a Source comment, and
#   docs/planning.md holds the markers with one table row per namelist;
#   bad input, exit 2 with a message naming the file: a namelist without its `!@ figure` line, a
#   page without the markers.
source "$(dirname "$0")/lib.bash"
P=validation/bench/published_compare.py
$PYTHON $P --rows narayanan21-t1-1.7b --search --out "$TEST_DIR/one.md" >/dev/null ||
    fail "published_compare.py --search exited non-zero"
$PYTHON $P --rows narayanan21-t1-1.7b,mt-nlg-530b-2240,llama3-405b-8192 --out "$TEST_DIR/two.md" ||
    fail "published_compare.py exited non-zero"
$PYTHON - "$TEST_DIR/one.md" "$TEST_DIR/two.md" <<'PY' || fail "table structure: $(cat "$TEST_DIR/two.md")"
import re, sys
def rows(path):
    lines = open(path).read().splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert len(head) == 14 and head[0] == "row" and head[10] == "speed ratio", head
    body = [[c.strip() for c in l.strip("|").split("|")] for l in lines[2:] if l.startswith("| ")]
    for cells in body:
        assert len(cells) == 14, cells
        pub, pred, ratio = float(cells[8]), float(cells[9]), float(cells[10])
        assert pub > 0 and pred > 0, cells
        assert abs(ratio - pub / pred) <= 0.01 * max(ratio, 1) + 0.01, (ratio, pub / pred)
    return lines, body
lines, one = rows(sys.argv[1])
assert len(one) == 1 and re.match(r"(#[1-3]|no) / (#[1-3]|no)", one[0][12]), one
# eq. 3 of Narayanan et al. 2021 for the 1.7B row: 96 B s l h^2 (1 + s/6h + V/16lh) / (32 x 0.44 x 312e12)
B, s, l, h, V = 512, 2048, 24, 2304, 51200
step = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (32 * 0.44 * 312e12)
assert abs(float(one[0][8]) - step) <= 0.01 * step, (one[0][8], step)
lines, two = rows(sys.argv[2])
assert [r[0] for r in two] == ["narayanan21-t1-1.7b", "llama3-405b-8192", "mt-nlg-530b-2240"], [r[0] for r in two]
assert two[2][6] == "60.1 s" and two[2][12] == "not run", two[2]
llama = two[1]
assert llama[2] == "412.2B" and llama[3] == "8192" and llama[6] == "430 TFLOP/s", llama
pred_tflops = float(llama[7].split()[0])
assert abs(float(llama[10]) - pred_tflops / 430) <= 0.01 + 0.003 * pred_tflops / 430, (llama[10], pred_tflops)
assert any(re.match(r"Within ±20% .*: \d+ of 3 rows", l) for l in lines), lines[-3:]
print("published_compare: 1.7B step %.3g s published (eq. 3), table rows %s" % (step, [r[10] for r in two]))
PY
# every namelist: its keys and its source; the page: one row per namelist between the markers
n=0
for f in inputs/published/*.nml; do
    n=$((n + 1))
    for k in figure value flops machine cite; do grep -q "^!@ $k = " "$f" || fail "$f: no !@ $k"; done
    grep -q "^! Source: " "$f" || fail "$f: no '! Source:' comment"
    grep -q "^| $(basename "$f" .nml) |" docs/planning.md || fail "docs/planning.md: no row for $f (make bench)"
done
[ "$n" -ge 8 ] || fail "only $n namelists in inputs/published/"
grep -q "^<!-- BEGIN published_compare.py" docs/planning.md || fail "docs/planning.md: no BEGIN marker"
grep -q "^<!-- END published_compare.py -->" docs/planning.md || fail "docs/planning.md: no END marker"
# bad input: a namelist without its figure, a page without the markers
expect_refusal() { # name want command...
    local name=$1 want=$2; shift 2
    "$@" >"$TEST_DIR/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || { cat "$TEST_DIR/$name.log"; fail "$name: exit $rc, not 2"; }
    grep -q -- "$want" "$TEST_DIR/$name.log" || { cat "$TEST_DIR/$name.log"; fail "$name: no '$want'"; }
    [ "$(wc -l <"$TEST_DIR/$name.log")" -eq 1 ] || { cat "$TEST_DIR/$name.log"; fail "$name: not one message"; }
}
mkdir -p "$TEST_DIR/bad"
grep -v '^!@ figure' inputs/published/narayanan21-t1-1.7b.nml >"$TEST_DIR/bad/nofigure.nml"
expect_refusal nofigure "nofigure.nml: no .!@ figure" $PYTHON $P --dir "$TEST_DIR/bad" --out "$TEST_DIR/bad.md"
echo "# no markers" >"$TEST_DIR/page.md"
expect_refusal nomarkers "page.md: no markers" $PYTHON $P --rows narayanan21-t1-1.7b --doc "$TEST_DIR/page.md"
echo "published_compare: ok ($n namelists)"
