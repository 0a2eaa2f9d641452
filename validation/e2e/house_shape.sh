#!/usr/bin/env bash
# house_shape.sh — the shape the code keeps (docs/design.md): no C function in src/ over 80 lines,
# and a file over 800 lines says at its top why it is one file. validation/house_metrics.py
# measures; a self-test first checks that it fails on a long function and on a long file.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/x"
echo "# fixture" >"$tmp/README.md"
{ echo "int f(void) {"; for i in $(seq 1 90); do echo "    int a$i = $i; (void)a$i;"; done; echo "    return 0;"; echo "}"
  for i in $(seq 1 800); do echo "/* line $i */"; done; } >"$tmp/src/x/long.c"
if out=$($PYTHON validation/house_metrics.py "$tmp" --check 2>&1); then
    echo "FAIL: house_metrics.py --check passed a fixture with a 93-line function and an 894-line file"; exit 1
fi
grep -q "function f is" <<<"$out" && grep -q "src/x/long.c:1: .* no reason" <<<"$out" ||
    { echo "FAIL: the fixture's faults were not both named:"; echo "$out"; exit 1; }
if ! $PYTHON validation/house_metrics.py . --check; then
    echo "FAIL: see the house_metrics lines above"; exit 1
fi
echo PASS
