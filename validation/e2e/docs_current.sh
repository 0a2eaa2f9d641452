#!/usr/bin/env bash
# docs_current.sh — the documentation is current: docs/namelist.md is exactly what
# validation/docs/namelist_ref.py writes from `llmtrain --keys` and validation/docs/namelist_notes.txt
# (a stale page fails naming docs/namelist.md:LINE, the first line that differs; `make docs`
# rewrites it), every key of the table has a note, and every relative link in README.md and
# docs/*.md points at a file that exists, and at a heading of it where it names one (#anchor);
# file:line of each broken one.
source "$(dirname "$0")/lib.bash"
[ -x ./llmtrain ] || fail "no ./llmtrain: build it with make llmtrain"
bad=0

# 1. the generated namelist reference (the generator itself fails on a key with no note)
fresh=$TEST_DIR/namelist.md
if ! $PYTHON validation/docs/namelist_ref.py --out "$fresh" 2>"$TEST_DIR/gen.err"; then
    cat "$TEST_DIR/gen.err"
    echo "FAIL: validation/docs/namelist_ref.py refused the notes (see above)"
    bad=1
elif [ ! -f docs/namelist.md ]; then
    echo "FAIL: docs/namelist.md is missing: run make docs"
    bad=1
elif ! cmp -s "$fresh" docs/namelist.md; then
    line=$(diff <(cat docs/namelist.md) "$fresh" | sed -n '1s/^\([0-9]*\).*/\1/p')
    echo "docs/namelist.md:${line:-1}: stale: it differs from what validation/docs/namelist_ref.py writes now"
    diff docs/namelist.md "$fresh" | head -10
    echo "FAIL: docs/namelist.md is stale: run make docs and commit it"
    bad=1
else
    echo "docs/namelist.md is current ($(wc -l <docs/namelist.md) lines)"
fi

# 2. relative links: [text](target) in README.md and docs/*.md
links=$($PYTHON - README.md docs/*.md <<'PY'
import os, re, sys
link = re.compile(r'\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
def lines(path):  # (number, text) outside fenced code blocks
    fence = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            yield n, line
def anchors(path):  # GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens
    if not path.endswith(".md") or not os.path.isfile(path):
        return None
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for _, l in lines(path) for h in re.findall(r"^#+\s+(.*)$", l)}
for path in sys.argv[1:]:
    for n, line in lines(path):
        for target in link.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # a URL
            file, _, frag = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                problem = "does not exist"
            elif frag and anchors(resolved) is not None and frag not in anchors(resolved):
                problem = "has no heading #" + frag
            else:
                problem = ""
            print("%s:%d\t%s\t%s\t%s" % (path, n, target, resolved, problem))
PY
)
nlinks=0
while IFS=$'\t' read -r where target resolved problem; do
    [ -n "$where" ] || continue
    nlinks=$((nlinks + 1))
    [ -n "$problem" ] || continue
    echo "$where: broken link: ($target) -> $resolved $problem"
    bad=1
done <<<"$links"
echo "$nlinks relative links checked in README.md and docs/*.md"

if [ $bad -ne 0 ]; then echo "FAIL"; exit 1; fi
echo "PASS"
