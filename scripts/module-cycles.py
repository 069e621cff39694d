#!/usr/bin/env python3
"""Find import cycles between sibling modules in every crate of the workspace.

    scripts/module-cycles.py [CRATE_SRC_DIR ...]

A module `a` depends on its sibling `b` when any file in `a`'s subtree names
a path into `b` (`crate::...::b`, `super::b`, `self::b`, or a bare `b::` in
the parent's own file). A child naming its parent's items (`super::Item`)
is composition, not a cycle, and is not counted. Cycles among siblings are
printed with one example reference per edge; the exit code is 1 when there
is any. Test code (`tests.rs`, `tests/`, `#[cfg(test)] mod tests { ... }`
blocks) is left out: tests may reach anywhere.

Without arguments it checks `*/src` of every workspace member.
"""

import os
import re
import sys
from collections import defaultdict

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# `use super::{a, b::c}` style groups: expand one level of braces.
GROUP_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^{}]*)\}")
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)


def strip_tests(text):
    """Drop `#[cfg(test)] mod x { ... }` blocks and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def module_files(src):
    """Map module path (tuple) -> file, following `mod x;` from the root."""
    root = None
    for name in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(src, name)):
            root = os.path.join(src, name)
            break
    files = {}

    def walk(path, file, dir_for_children):
        files[path] = file
        text = open(file, encoding="utf-8").read()
        for m in MOD_RE.finditer(strip_tests(text)):
            child = m.group(1)
            if child == "tests":
                continue
            cand = [os.path.join(dir_for_children, child + ".rs"),
                    os.path.join(dir_for_children, child, "mod.rs")]
            for c in cand:
                if os.path.exists(c):
                    sub = os.path.join(dir_for_children, child)
                    walk(path + (child,), c, sub)
                    break

    if root:
        walk((), root, src)
    # main.rs of a lib+bin crate: also walk the binary's own modules.
    return files


def resolve(path, kind, segs, modules):
    """The module path a reference points into, or None."""
    if kind == "crate":
        base = ()
    elif kind == "self":
        base = path
    else:  # super (possibly repeated)
        base = path[:-1]
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
    target = base
    for s in segs:
        if target + (s,) in modules:
            target = target + (s,)
        else:
            break
    return target


def edges_of(src):
    modules = module_files(src)
    edges = defaultdict(dict)  # (a, b) siblings -> example
    for path, file in modules.items():
        text = strip_tests(open(file, encoding="utf-8").read())
        refs = []
        for m in GROUP_RE.finditer(text):
            prefix = [s for s in m.group(2).split("::") if s]
            for item in m.group(3).split(","):
                item = item.strip()
                if item:
                    refs.append((m.group(1), prefix + [s for s in item.split("::") if s and s != "self"]))
        for m in PATH_RE.finditer(text):
            refs.append((m.group(1), [s for s in m.group(2).split("::") if s]))
        # Bare `use child::...` in a module's own file.
        for m in re.finditer(r"\buse\s+([a-z_][a-z0-9_]*)::", text):
            if path + (m.group(1),) in modules:
                refs.append(("self", [m.group(1)]))
        for kind, segs in refs:
            target = resolve(path, kind, segs, modules)
            if target is None:
                continue
            # Find the sibling pair: the first place the two paths differ.
            common = 0
            while common < min(len(path), len(target)) and path[common] == target[common]:
                common += 1
            if common == len(path) or common == len(target):
                continue  # same module, parent, or child
            a = path[: common + 1]
            b = target[: common + 1]
            edges[(a, b)].setdefault("example", f"{os.path.relpath(file)}: {kind}::{'::'.join(segs)}")
    return edges


def cycles(edges):
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    found, seen = [], set()
    # Tarjan's strongly connected components.
    index, low, stack, on, counter = {}, {}, [], set(), [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            strong(v)
    return found


def main():
    sys.setrecursionlimit(10000)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    srcs = sys.argv[1:] or sorted(
        os.path.join(root, d, "src") for d in os.listdir(root)
        if os.path.exists(os.path.join(root, d, "Cargo.toml")) and os.path.isdir(os.path.join(root, d, "src"))
    )
    bad = 0
    for src in srcs:
        edges = edges_of(src)
        for comp in cycles(edges):
            bad += 1
            names = ["::".join(c) for c in comp]
            print(f"{os.path.relpath(src, root)}: cycle between {', '.join(names)}")
            members = set(comp)
            for (a, b), e in sorted(edges.items()):
                if a in members and b in members:
                    print(f"    {'::'.join(a)} -> {'::'.join(b)}  ({e['example']})")
    if bad:
        print(f"{bad} import cycle(s)")
        return 1
    print(f"no import cycle between sibling modules ({len(srcs)} crates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
