#!/usr/bin/env python3
"""Check docs/architecture.md against the code, so that it cannot drift quietly.

    scripts/check-architecture-doc.py [--root DIR] [--doc FILE]

What the page names must exist (fenced code blocks are skipped):

- paths: every `inline code` naming a repository path (its first part is an
  entry of the repository's top directory: `gateway/src/hub.rs`,
  `engine/src/presence/`, `.ci/run`) and every relative link target
  ([text](../bench/reports/x.md)) exists. Anchors are left to
  scripts/check-links.sh.
- Rust items: every `inline code` that reads as a Rust item is defined in a
  workspace crate's `src/` (a struct, enum, trait, type, fn, const, static,
  mod or macro, a module file, or a `pub use` of that name):
  * `CamelCase`: defined somewhere;
  * `snake_case()`: a fn defined somewhere;
  * a path with `::`: its longest leading part that names a module (by the
    end of its module path, `session::core` = gateway/src/session/core.rs;
    a leading crate name, `herald_amqp::` or `engine::`, pins the crate) and
    then at most `Item` or `Type::member` defined in that module, where
    `member` is a fn, const or variant in a file that defines or impls
    `Type`; or, with no module part, `Type::member` anywhere. Names from
    std and the dependencies (`Arc`, `Bytes`, `tokio::...`) are left alone.
- the task table (the table whose header names `tasks`): each row's first
  cell names its binary (`gateway` or `router`), its `kebab-case` code
  spans are task names. A task is a name given to `task_fn("name", ..)`,
  `.into_task("name", ..)`, `intake!(Type, "name", ..)` (the router's
  AMQP intakes, router/src/intake.rs), or returned by `fn name(&self)` of an
  `impl Task for X`, in a crate's non-test code. Every task of the router
  and gateway crates is listed in a row of its own binary; every task of a
  library crate (engine, amqp) in some row; nothing else is listed.
- configuration keys: every `section.key` (also `section.key = value`)
  whose section is one of the configuration table's (the `key("...", ..)`
  rows in the crates' non-test code: engine/src/config/table.rs and each
  binary's src/config/keys.rs) is a key
  of that table, or a field of one of its table-valued keys.
- no numeric claim about file sizes ("N lines"): nothing keeps it true.

Prints each problem as doc:line and exits 1 when there is any.
"""

import argparse
import importlib.util
import os
import re
import sys

BINARIES = ("router", "gateway")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
RUST_PATH = re.compile(rf"^{IDENT}(?:::{IDENT})*(?:\(\))?$")
CAMEL = re.compile(r"^[A-Z][a-z0-9]+[A-Za-z0-9]*$")
TASK_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
LINES_CLAIM = re.compile(r"\b\d[\d,]*\s+lines\b")
DEF = re.compile(
    rf"\b(?:struct|enum|union|trait|type|fn|const|static|mod)\s+({IDENT})|macro_rules!\s*({IDENT})"
)
MEMBER_DEF = re.compile(rf"\b(?:fn|const|type)\s+({IDENT})")
PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")
INLINE_MOD = re.compile(rf"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*\{{", re.M)
CONFIG_KEY = re.compile(r"\bkey\(\s*\"([a-z_][a-z0-9_.]*)\"")
DOC_KEY = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)(?:\s*=.*)?$")
TASK_FN = re.compile(
    r"(?:\btask_fn|\.into_task)\(\s*\"([^\"]+)\"|\bintake!\(\s*[^,]+,\s*\"([^\"]+)\""
)
TASK_IMPL = re.compile(
    r"\bimpl(?:<[^{]*?>)?\s+(?:[\w:]*::)?Task\s+for\s+[^{]+\{\s*"
    r"fn\s+name\s*\(\s*&self\s*\)\s*->\s*&'static\s+str\s*\{\s*\"([^\"]+)\"",
    re.S,
)
# Names from std and the dependencies the page may mention.
EXTERNAL = {"Arc", "Box", "Bytes", "BytesMut", "Mutex", "Option", "Rc", "Result", "String", "Vec"}
EXTERNAL_CRATES = {
    "std", "core", "alloc", "tokio", "tokio_util", "lapin", "hyper", "axum", "bytes",
    "serde", "redb", "redis", "tracing", "rustls", "futures", "futures_util",
}


def _module_cycles():
    """scripts/module-cycles.py, whose reading of Rust sources this shares."""
    spec = importlib.util.spec_from_file_location(
        "module_cycles", os.path.join(os.path.dirname(os.path.abspath(__file__)), "module-cycles.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Drop `//` comments and `#[cfg(test)] mod x { ... }` blocks.
strip_comments_and_tests = _module_cycles().strip_tests


def is_test_file(rel):
    parts = rel.split("/")
    return parts[-1] in ("tests.rs", "test.rs") or "tests" in parts[:-1]


class Code:
    """The workspace's crates: module files, definitions, tasks."""

    def __init__(self, root):
        self.root = root
        self.crates = workspace_members(root)
        # (crate, module path tuple) -> [text of its file(s)]
        self.modules = {}
        # name -> [(crate, file)] of definitions, and file -> text
        self.defined = {}
        self.texts = {}
        # crate -> set of task names
        self.tasks = {}
        # every configuration key of the table
        self.config_keys = set()
        for crate in self.crates:
            src = os.path.join(root, crate, "src")
            self.tasks[crate] = set()
            for dirpath, dirnames, filenames in os.walk(src):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(".rs"):
                        self._read(crate, src, os.path.join(dirpath, name))

    def _read(self, crate, src, path):
        rel = os.path.relpath(path, src).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        text = re.sub(r"//[^\n]*", "", raw)
        self.texts[path] = text
        parts = rel[: -len(".rs")].split("/")
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            parts = []
        modpath = tuple(parts)
        self.modules.setdefault((crate, modpath), []).append(path)
        for m in INLINE_MOD.finditer(text):
            self.modules.setdefault((crate, modpath + (m.group(1),)), []).append(path)
        for name in self._names_defined(text):
            self.defined.setdefault(name, []).append((crate, path))
        if not is_test_file(rel):
            code = strip_comments_and_tests(raw)
            self.tasks[crate].update(a or b for a, b in TASK_FN.findall(code))
            self.tasks[crate].update(TASK_IMPL.findall(code))
            self.config_keys.update(CONFIG_KEY.findall(code))

    @staticmethod
    def _names_defined(text):
        names = {a or b for a, b in DEF.findall(text)}
        for body in PUB_USE.findall(text):
            for m in re.finditer(rf"\b({IDENT})\b(?!\s*::)", body):
                if m.group(1) not in ("as", "self", "crate", "super", "_"):
                    names.add(m.group(1))
        return names

    def crate_of(self, segment):
        for crate in self.crates:
            if segment in (crate, "herald_" + crate):
                return crate
        return None

    def defines(self, path, name):
        return name in self._names_defined(self.texts[path])

    def has_member(self, typ, member):
        """`member` is a fn/const/type, or a variant, in a file that defines
        or impls `typ`."""
        impl = re.compile(rf"\bimpl\b[^{{;]*?\b{re.escape(typ)}\b[^{{;]*\{{")
        enum = re.compile(rf"\benum\s+{re.escape(typ)}\b")
        variant = re.compile(rf"^\s*{re.escape(member)}\b\s*(?:[({{,]|$)", re.M)
        for path, text in self.texts.items():
            own = typ in {a or b for a, b in DEF.findall(text)}
            if not (own or impl.search(text)):
                continue
            if member in MEMBER_DEF.findall(text):
                return True
            if enum.search(text) and variant.search(text):
                return True
        return False

    def resolves(self, segments):
        """Whether a `::` path names something defined (see the module docs)."""
        if segments[0] in EXTERNAL_CRATES:
            return True
        tries = [(None, segments)]
        crate = self.crate_of(segments[0])
        if crate:
            tries.insert(0, (crate, segments[1:]))
        for crate, segs in tries:
            for k in range(len(segs), -1, -1):
                rest = segs[k:]
                if len(rest) > 2:
                    break
                for (c, modpath), files in self.modules.items():
                    if crate is not None and c != crate:
                        continue
                    if crate is not None and modpath != tuple(segs[:k]):
                        continue
                    if crate is None and (k == 0 or modpath[len(modpath) - k:] != tuple(segs[:k])):
                        continue
                    if not rest:
                        return True
                    if any(self.defines(f, rest[0]) for f in files) and (
                        len(rest) == 1 or self.has_member(rest[0], rest[1])
                    ):
                        return True
            if crate is None and len(segs) == 2 and segs[0] in self.defined:
                if self.has_member(segs[0], segs[1]):
                    return True
        return False


def workspace_members(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^members\s*=\s*\[([^\]]*)\]", text, re.M)
    if not m:
        return []
    return [c for c in re.findall(r'"([^"]+)"', m.group(1)) if os.path.isdir(os.path.join(root, c, "src"))]


def doc_lines(path):
    """(line number, line) outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1) == fence:
                    fence = None
                continue
            if fence is None:
                yield number, line.rstrip("\n")


def check_paths(root, doc, lines, problems):
    top = {e for e in os.listdir(root) if e not in (".git", "target")}
    where = os.path.relpath(doc, root)
    for number, line in lines:
        for span in CODE.findall(line):
            span = span.strip()
            if not re.fullmatch(r"[\w.\-/]+", span) or "/" not in span:
                continue
            if span.split("/")[0] not in top:
                continue
            if not os.path.exists(os.path.join(root, span)):
                problems.append(f"{where}:{number}: path `{span}` does not exist")
        for target in LINK.findall(line):
            if SCHEME.match(target) or target.startswith("#"):
                continue
            file = target.split("#")[0]
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), file))):
                problems.append(f"{where}:{number}: link target {target} does not exist")


def check_items(code, root, doc, lines, problems):
    where = os.path.relpath(doc, root)
    for number, line in lines:
        for span in CODE.findall(line):
            span = span.strip()
            if not RUST_PATH.match(span):
                continue
            call = span.endswith("()")
            name = span[:-2] if call else span
            segments = name.split("::")
            if len(segments) > 1:
                ok = code.resolves(segments)
            elif call:
                ok = any(
                    name in MEMBER_DEF.findall(code.texts[p]) for _, p in code.defined.get(name, [])
                )
            elif CAMEL.match(name):
                ok = name in EXTERNAL or name in code.defined
            else:
                continue
            if not ok:
                problems.append(f"{where}:{number}: `{span}` is not defined in the workspace")


def task_table(lines):
    """[(line number, binary or None, first cell, [task names])] of the table
    whose header has a `tasks` column."""
    rows, column, in_table = [], None, False
    for number, line in lines:
        if not line.lstrip().startswith("|"):
            in_table, column = False, None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            in_table = True
            lowered = [c.lower() for c in cells]
            column = lowered.index("tasks") if "tasks" in lowered else None
            continue
        if column is None or set(line.strip()) <= set("|-: "):
            continue
        first = cells[0].lower()
        binary = next((b for b in BINARIES if re.search(rf"\b{b}\b", first)), None)
        names = [s for s in CODE.findall(cells[column]) if TASK_NAME.match(s)]
        rows.append((number, binary, cells[0], names))
    return rows


def check_tasks(code, root, doc, lines, problems):
    where = os.path.relpath(doc, root)
    rows = task_table(lines)
    if not rows:
        problems.append(f"{where}: no task table (a table with a `tasks` column)")
        return
    listed = {b: set() for b in BINARIES}
    for number, binary, first, names in rows:
        if binary is None:
            problems.append(f"{where}:{number}: task table row '{first}' names neither binary ({', '.join(BINARIES)})")
            continue
        listed[binary].update(names)
    shared = set()
    for crate, tasks in code.tasks.items():
        if crate in BINARIES:
            for task in sorted(tasks - listed[crate]):
                problems.append(f"{where}: task table: `{task}` ({crate} crate) is missing from the {crate} rows")
        else:
            shared |= tasks
            for task in sorted(tasks - listed["router"] - listed["gateway"]):
                problems.append(f"{where}: task table: `{task}` ({crate} crate) is in no row")
    for binary in BINARIES:
        own = code.tasks.get(binary, set())
        for task in sorted(listed[binary] - own - shared):
            elsewhere = sorted(c for c, t in code.tasks.items() if task in t)
            hint = f" (it is a task of the {', '.join(elsewhere)} crate)" if elsewhere else ""
            problems.append(f"{where}: task table: `{task}` in the {binary} rows is no task of the {binary} crate or a library{hint}")


def check_config_keys(code, root, doc, lines, problems):
    where = os.path.relpath(doc, root)
    if not code.config_keys:
        problems.append(f"{where}: no configuration table found (no `key(\"...\", ..)` row in the crates)")
        return
    sections = {k.split(".")[0] for k in code.config_keys if "." in k}
    for number, line in lines:
        for span in CODE.findall(line):
            m = DOC_KEY.match(span.strip())
            if not m or m.group(1).split(".")[0] not in sections:
                continue
            key = m.group(1)
            if not any(key == k or key.startswith(k + ".") for k in code.config_keys):
                problems.append(f"{where}:{number}: configuration key `{key}` is in no row of the configuration table")


def check_line_counts(root, doc, lines, problems):
    where = os.path.relpath(doc, root)
    for number, line in lines:
        if LINES_CLAIM.search(line):
            problems.append(f"{where}:{number}: a claim in lines ('{LINES_CLAIM.search(line).group(0)}'): nothing checks it, drop it")


def check(root, doc):
    """The problems of `doc` against the code under `root`, as strings."""
    lines = list(doc_lines(doc))
    code = Code(root)
    problems = []
    check_paths(root, doc, lines, problems)
    check_items(code, root, doc, lines, problems)
    check_tasks(code, root, doc, lines, problems)
    check_config_keys(code, root, doc, lines, problems)
    check_line_counts(root, doc, lines, problems)
    return problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(here))
    parser.add_argument("--doc", default=None)
    args = parser.parse_args()
    doc = args.doc or os.path.join(args.root, "docs", "architecture.md")
    problems = check(args.root, doc)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{os.path.relpath(doc, args.root)}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{os.path.relpath(doc, args.root)}: every path, Rust item, task and configuration key it names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
