#!/usr/bin/env python3
"""Measures of the code's shape: the largest files, functions over a length, README lines.
Usage: house_metrics.py [root] [--limit 80] [--check]
--check (validation/e2e/house_shape.sh, in make check): exit 1 naming each src/ file over 800
lines whose first 60 lines do not say why it is one file ("Why one file ..." or "longer than
~800 lines"), and each C function over --limit lines."""
import os, re, sys

WHY = re.compile(r"(?i)why one file|longer than ~?800")

def functions(path):
    """(name, first line, lines) of each top-level function definition in a C file."""
    text = open(path, encoding="utf-8", errors="replace").read()
    # blank out comments and strings, keeping newlines, so braces inside them do not count
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    out, depth, start, name = [], 0, None, None
    lines = text.split("\n")
    head = ""
    for i, line in enumerate(lines, 1):
        for ch in line:
            if ch == "{":
                if depth == 0:
                    m = re.search(r"(\w+)\s*\([^;{}]*\)\s*$", head.strip())
                    start, name = (i, m.group(1)) if m and m.group(1) not in ("if", "for", "while", "switch") else (None, None)
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start:
                    out.append((name, start, i - start + 1))
                    start = None
                if depth == 0:
                    head = ""
            elif depth == 0:
                head += ch
        if depth == 0:
            head += "\n"
            if line.strip().endswith(";") or line.startswith("#"):
                head = ""
    return out

def main():
    root = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "."
    limit = int(sys.argv[sys.argv.index("--limit") + 1]) if "--limit" in sys.argv else 80
    files = []
    for d, _, names in os.walk(os.path.join(root, "src")):
        for n in names:
            if n.endswith((".c", ".h", ".cu", ".py")):
                p = os.path.join(d, n)
                files.append((sum(1 for _ in open(p, errors="replace")), os.path.relpath(p, root)))
    files.sort(reverse=True)
    print("largest files:")
    for n, p in files[:5]:
        print(f"  {n:6d}  {p}")
    print(f"files over 800 lines: {sum(1 for n, _ in files if n > 800)}")
    long = []
    for _, p in files:
        if p.endswith((".c", ".cu")):
            long += [(n, p, name, ln) for name, ln, n in functions(os.path.join(root, p)) if n > limit]
    long.sort(reverse=True)
    print(f"functions over {limit} lines: {len(long)}")
    for n, p, name, ln in long[:15]:
        print(f"  {n:5d}  {p}:{ln} {name}")
    readme = os.path.join(root, "README.md")
    print(f"README.md lines: {sum(1 for _ in open(readme))}")
    if "--check" in sys.argv:
        bad = [f"{p}:1: {n} lines and no reason at its top (say 'Why one file ...' in its header)"
               for n, p in files if n > 800 and not WHY.search("".join(open(os.path.join(root, p)).readlines()[:60]))]
        bad += [f"{p}:{ln}: function {name} is {n} lines (at most {limit})" for n, p, name, ln in long]
        for b in bad:
            print("house_metrics: " + b)
        sys.exit(1 if bad else 0)

main()
