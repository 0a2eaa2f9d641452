#!/usr/bin/env bash
# The layers of src/ hold (docs/design.md, the order table between <!-- layers:begin --> and
# <!-- layers:end -->): validation/layers.py reads every #include "..." under src/ and fails,
# naming file:line, on an arrow the table forbids and on any cycle between units (foo.c + foo.h).
#  1. a fixture first: a tiny src/ with one forbidden arrow (core/ including model/) and one
#     cycle (a.c -> b.h, b.c -> a.h) must fail, naming the forbidden line and the cycle's
#     members; the same fixture without them must pass;
#  2. then the real src/ against the real table.
source "$(dirname "$0")/lib.bash"
LAYERS=validation/layers.py

fx=$TEST_DIR/fixture
mkdir -p "$fx/src/core" "$fx/src/model" "$fx/docs"
cat >"$fx/docs/design.md" <<'MD'
<!-- layers:begin -->
| folder | may include |
|---|---|
| `core` | — |
| `model` | `core` |
<!-- layers:end -->
MD
printf '#include "core/err.h"\n' >"$fx/src/core/err.c"
printf '/* err.h */\n' >"$fx/src/core/err.h"
printf '#include "model/b.h"\n#include "core/err.h"\n' >"$fx/src/model/a.c"
printf '/* a.h */\n' >"$fx/src/model/a.h"
printf '#include "model/b.h"\n' >"$fx/src/model/b.c"
printf '/* b.h */\n' >"$fx/src/model/b.h"
printf '/* c.h */\n' >"$fx/src/model/c.h"
$PYTHON $LAYERS --src "$fx/src" --design "$fx/docs/design.md" >"$TEST_DIR/clean.log" 2>&1 ||
    { cat "$TEST_DIR/clean.log"; fail "the clean fixture failed"; }
printf '#include "core/err.h"\n#include "model/c.h"\n' >"$fx/src/core/err.c" # forbidden arrow
printf '#include "model/b.h"\n#include "model/a.h"\n' >"$fx/src/model/b.c" # a -> b -> a
if $PYTHON $LAYERS --src "$fx/src" --design "$fx/docs/design.md" >"$TEST_DIR/bad.log" 2>&1; then
    cat "$TEST_DIR/bad.log"; fail "the fixture with a forbidden include and a cycle passed"
fi
grep -q 'src/core/err.c:2: core/ may not include model/c.h' "$TEST_DIR/bad.log" ||
    { cat "$TEST_DIR/bad.log"; fail "the forbidden include core/err.c:2 was not named"; }
grep -q 'cycle between model/a, model/b' "$TEST_DIR/bad.log" ||
    { cat "$TEST_DIR/bad.log"; fail "the cycle model/a <-> model/b was not named"; }
echo "fixture: forbidden include and cycle named"

$PYTHON $LAYERS >"$TEST_DIR/src.log" 2>&1
rc=$?
cat "$TEST_DIR/src.log"
[ $rc -eq 0 ] || fail "src/ breaks the layers of docs/design.md (lines above)"
echo "layers: all checks passed"
