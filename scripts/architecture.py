#!/usr/bin/env python3
"""Architecture checks (issue 11), run by scripts/test.sh.

1. No import circles between the modules of a crate: an edge A -> B for every `use crate::B…`,
   `use super::…` and inline `crate::B::…` path in A's code (comments, doc links and
   `#[cfg(test)]` modules left out; a module's own ancestors do not count). Any strongly
   connected set of two or more modules fails the check.
2. File sizes: no file of `crates/engram-core/src/engine/` over 400 lines; no product source
   file over 900 lines (the benchmark tool and the test kit are not product code).

Usage: python3 scripts/architecture.py   (exit status 1 on a violation)
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["engram-core", "engram-store", "engram-providers", "engram"]


def modname(root, path):
    parts = os.path.relpath(path, root)[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts) or "crate"


def resolve(full, mods):
    parts = full.split("::")
    for k in range(len(parts), 0, -1):
        cand = "::".join(parts[:k])
        if cand in mods:
            return cand
    return None


def edges_of(root):
    mods = {modname(root, f): f for f in glob.glob(root + "/**/*.rs", recursive=True)}
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        src = open(f, encoding="utf-8").read()
        src = re.split(r"#\[cfg\(test\)\]", src)[0]
        src = re.sub(r"//[^\n]*", "", src)
        targets = []
        for full in re.findall(r"(?<![\w:])crate::((?:\w+::)*\w+)", src):
            targets.append(full)
        for base, inner in re.findall(r"\buse super::((?:\w+::)*)\{?([\w, \n:]*)\}?;", src):
            parent = m.rsplit("::", 1)[0] if "::" in m else ""
            for name in re.split(r",\s*", inner):
                name = name.strip().split("::")[0]
                if name:
                    path = base + name
                    targets.append((parent + "::" + path) if parent else path)
        for t in targets:
            target = resolve(t, mods)
            if target and target != m and not m.startswith(target + "::"):
                edges[m].add(target)
    return edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            strong(v)
    return out


def main():
    failed = False
    for c in CRATES:
        root = os.path.join(ROOT, "crates", c, "src")
        for comp in cycles(edges_of(root)):
            print(f"import circle in {c}: {' <-> '.join(comp)}")
            failed = True
    for f in sorted(glob.glob(os.path.join(ROOT, "crates", "*", "src", "**", "*.rs"), recursive=True)):
        n = sum(1 for _ in open(f, encoding="utf-8"))
        rel = os.path.relpath(f, ROOT)
        if "/engine/" in rel and rel.startswith("crates/engram-core/") and n > 400:
            print(f"{rel}: {n} lines (an engine file has at most 400)")
            failed = True
        elif n > 900 and "engram-bench" not in rel and "testkit" not in rel:
            print(f"{rel}: {n} lines (a product source file has at most 900)")
            failed = True
    if failed:
        sys.exit(1)
    print("architecture: no import circles; engine files within 400 lines, others within 900")


if __name__ == "__main__":
    main()
