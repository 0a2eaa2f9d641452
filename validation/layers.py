#!/usr/bin/env python3
"""layers.py -- the include arrows of src/ against the folder order of docs/design.md.

Reads every `#include "..."` in src/ (.c .h .cu .cuh), resolves it to a file (relative to src/,
then to the including file's folder) and fails, naming file:line, on
  1. an include whose target folder the order table does not allow the including folder to use
     (the table between <!-- layers:begin --> and <!-- layers:end --> in docs/design.md; a
     file belongs to the most specific folder listed: src/kernels/cpu/x.c to kernels/cpu);
  2. an include that resolves to no file in src/ (generated headers, listed below, excepted);
  3. a file in a folder the table does not list;
  4. a cycle between units: foo.c, foo.h (and foo.cu, foo.cuh) are one unit, and a unit that
     reaches itself through includes of other units is a cycle; each cycle's members are named
     with the include lines that close it. A header with no source file of its own named
     foo_bar.h belongs to the unit foo of its folder when there is one: a module's second
     header (parallel/comm_host.h, io/tokenizer_internal.h) is the module, not a layer of its
     own. A module split over several sources still has one direction: foo_bar.c is a unit of
     its own, and foo.c must not call into it while it calls foo.c.
Python 3 standard library only; exit 0 when clean, 1 with one line per problem otherwise.

usage: layers.py [--src DIR] [--design FILE]   (defaults: src, docs/design.md from the repo root)
"""
import argparse
import os
import re
import sys

EXTS = (".c", ".h", ".cu", ".cuh")
GENERATED = {"buildinfo_gen.h"}  # written into $(BUILD) by the Makefile, found by -I$(BUILD)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ROW = re.compile(r"^\|\s*`?([^|`]+?)`?\s*\|\s*([^|]*)\|")


def read_table(design):
    """{folder: set(folders it may include)} from the marked table in design."""
    with open(design, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!--\s*layers:begin\s*-->(.*?)<!--\s*layers:end\s*-->", text, re.S)
    if not m:
        sys.exit(f"layers: {design}: no table between <!-- layers:begin --> and <!-- layers:end -->")
    table = {}
    for line in m.group(1).splitlines():
        r = ROW.match(line.strip())
        if not r or set(r.group(1)) <= set("-: "):
            continue
        folder = r.group(1).strip()
        if folder.lower() in ("folder", "layer"):
            continue  # the header row
        allowed = {a.strip().strip("`") for a in r.group(2).split(",") if a.strip().strip("`")}
        allowed.discard("—")
        allowed.discard("-")
        table[folder] = allowed | {folder}
    if not table:
        sys.exit(f"layers: {design}: the layers table has no rows")
    return table


def folder_of(rel, table):
    """The most specific folder of the table holding rel (a path relative to src/), or None."""
    if rel in table:  # a file with a row of its own (main.c)
        return rel
    parts = rel.split("/")[:-1]
    while parts:
        d = "/".join(parts)
        if d in table:
            return d
        parts.pop()
    return None


def unit_of(rel, sources=frozenset(), stems=frozenset()):
    """foo for foo.c / foo.h / foo.cu / foo.cuh; a header-only foo_bar.h: foo when foo exists."""
    base, ext = os.path.splitext(rel)
    if ext not in EXTS:
        return rel
    if ext in (".h", ".cuh") and base not in sources:
        d, name = os.path.split(base)
        parts = name.split("_")
        for k in range(len(parts) - 1, 0, -1):
            cand = "/".join(filter(None, [d, "_".join(parts[:k])]))
            if cand in stems:
                return cand
    return base


def scan(src):
    """[(rel, line, target_rel or None, spelled)] for every quoted include under src."""
    arrows, files = [], []
    for root, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(EXTS):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            files.append(rel)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    spelled = m.group(1)
                    target = None
                    for cand in (spelled, os.path.join(os.path.dirname(rel), spelled)):
                        cand = os.path.normpath(cand).replace(os.sep, "/")
                        if os.path.isfile(os.path.join(src, cand)):
                            target = cand
                            break
                    arrows.append((rel, n, target, spelled))
    return files, arrows


def cycles(files, arrows):
    """Strongly connected components of more than one unit: [(sorted members, [arrow...])]."""
    stems = {os.path.splitext(f)[0] for f in files}
    sources = {os.path.splitext(f)[0] for f in files if f.endswith((".c", ".cu"))}
    graph, via = {}, {}
    for rel, n, target, _ in arrows:
        if target is None:
            continue
        a, b = unit_of(rel, sources, stems), unit_of(target, sources, stems)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b:
            graph[a].add(b)
            via.setdefault((a, b), []).append((rel, n, target))
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):  # Tarjan, iterative so deep include chains do not hit the recursion limit
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[u] = min(low[u], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == u:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    result = []
    for comp in sorted(out):
        members = set(comp)
        edges = [e for (a, b), es in sorted(via.items()) if a in members and b in members for e in es]
        result.append((comp, edges))
    return result


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(root, "src"))
    ap.add_argument("--design", default=os.path.join(root, "docs", "design.md"))
    args = ap.parse_args()
    table = read_table(args.design)
    files, arrows = scan(args.src)
    problems = []
    shown = os.path.relpath(args.src).replace(os.sep, "/")
    design = os.path.relpath(args.design).replace(os.sep, "/")
    for rel in files:
        if folder_of(rel, table) is None:
            problems.append(f"{shown}/{rel}: its folder is not in the layers table of {design}")
    for rel, n, target, spelled in arrows:
        if target is None:
            if os.path.basename(spelled) not in GENERATED:
                problems.append(f'{shown}/{rel}:{n}: #include "{spelled}" is no file under {shown}/')
            continue
        a, b = folder_of(rel, table), folder_of(target, table)
        if a is None or b is None:
            continue  # reported above
        if b not in table[a]:
            may = ", ".join(sorted(table[a] - {a})) or "nothing outside itself"
            problems.append(f"{shown}/{rel}:{n}: {a}/ may not include {target} ({b}/); "
                            f"{a}/ may include {may} ({design})")
    for comp, edges in cycles(files, arrows):
        closing = "; ".join(f"{shown}/{r}:{n} includes {t}" for r, n, t in edges)
        problems.append(f"cycle between {', '.join(comp)} (foo.c + foo.h = one unit): {closing}")
    for p in problems:
        print("layers: " + p)
    n_cyc = sum(1 for p in problems if p.startswith("cycle"))
    print(f"layers: {len(files)} files, {len(arrows)} includes, "
          f"{len(problems) - n_cyc} forbidden or unresolved, {n_cyc} cycles")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
