#!/usr/bin/env python3
"""mdBook preprocessor: links that leave the book point at the repository.

The pages under docs/ link to files elsewhere in the repository
(`../deploy/README.md`, `../bench/reports/compare.md`, `../engine/openapi.json`),
which resolve on GitHub and in a checkout but are not part of the built site.
This rewrites each such link to the file in the repository's web view:
`<repository>/blob/main/<path>` (`tree/` for a directory), the repository
being the workspace's `repository` in Cargo.toml. So does a link to a page
of docs/ that is no chapter (SUMMARY.md). A link to README.md, which mdBook
serves as index.html, is pointed at the index. Other links inside the book,
with a scheme, or to an anchor of the same page are left alone; fenced code
blocks and inline code are not touched. A link to a file that does not exist
fails the build (scripts/check-links.sh says the same for the Markdown).

mdBook runs it as `python3 ../scripts/mdbook-repo-links.py` from docs/
(book.toml, [preprocessor.repo-links]): first with `supports RENDERER`, then
with `[context, book]` as JSON on stdin, answering the book on stdout.
"""
import json
import os
import re
import sys

INLINE = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
REFERENCE = re.compile(r"^(\s{0,3}\[[^\]]+\]:\s+<?)(\S+?)(>?(?:\s+.*)?)$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
CODE = re.compile(r"(`+)(?:(?!\1).)*?\1")


def repository(repo_root):
    """The workspace's `repository = "..."` from Cargo.toml."""
    with open(os.path.join(repo_root, "Cargo.toml"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^\s*repository\s*=\s*"([^"]+)"', line)
            if m:
                return m.group(1).rstrip("/")
    sys.exit("mdbook-repo-links: no `repository` in Cargo.toml")


class Rewriter:
    def __init__(self, src_dir, repo_root, url, chapters):
        self.src_dir = os.path.realpath(src_dir)
        self.repo_root = os.path.realpath(repo_root)
        self.url = url
        # Each chapter's source file (src-relative) -> the path mdBook renders it at.
        self.chapters = chapters
        self.missing = []

    def target(self, page_dir, link, where):
        if SCHEME.match(link) or link.startswith(("#", "//", "/")):
            return link
        path, hash_, anchor = link.partition("#")
        resolved = os.path.realpath(os.path.join(page_dir, path))
        if resolved == self.src_dir or resolved.startswith(self.src_dir + os.sep):
            source = os.path.relpath(resolved, self.src_dir).replace(os.sep, "/")
            if not source.endswith(".md") or not os.path.isfile(resolved):
                return link
            if source in self.chapters:
                rendered = self.chapters[source]
                if rendered == source:
                    return link
                return os.path.relpath(os.path.join(self.src_dir, rendered), page_dir) + hash_ + anchor
        if not (resolved == self.repo_root or resolved.startswith(self.repo_root + os.sep)):
            self.missing.append(f"{where}: {link}: outside the repository")
            return link
        if not os.path.exists(resolved):
            self.missing.append(f"{where}: {link}: no such file")
            return link
        kind = "tree" if os.path.isdir(resolved) else "blob"
        rel = os.path.relpath(resolved, self.repo_root).replace(os.sep, "/")
        return f"{self.url}/{kind}/main/{rel}{hash_}{anchor}"

    def content(self, text, source_path):
        page_dir = os.path.dirname(os.path.join(self.src_dir, source_path))
        out = []
        fence = None
        for number, line in enumerate(text.split("\n"), 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1) == fence:
                    fence = None
                out.append(line)
                continue
            if fence is not None:
                out.append(line)
                continue
            where = f"{source_path}:{number}"
            out.append(self.line(line, page_dir, where))
        return "\n".join(out)

    def line(self, line, page_dir, where):
        # Links are found with inline code masked (a link's text may be
        # code: [`x.toml`](../x.toml)), then replaced in the line itself.
        masked = CODE.sub(lambda m: "x" * len(m.group(0)), line)
        spans = [m.span(2) for m in INLINE.finditer(masked)]
        m = REFERENCE.match(masked)
        if m:
            spans.append(m.span(2))
        for start, end in sorted(spans, reverse=True):
            line = line[:start] + self.target(page_dir, line[start:end], where) + line[end:]
        return line

    @staticmethod
    def chapters_of(node, found=None):
        """source_path -> path of every chapter of the book."""
        found = {} if found is None else found
        if isinstance(node, dict):
            if node.get("source_path") and node.get("path"):
                found[node["source_path"].replace(os.sep, "/")] = node["path"].replace(os.sep, "/")
            for value in node.values():
                Rewriter.chapters_of(value, found)
        elif isinstance(node, list):
            for value in node:
                Rewriter.chapters_of(value, found)
        return found

    def walk(self, node):
        if isinstance(node, dict):
            if isinstance(node.get("content"), str) and node.get("source_path"):
                node["content"] = self.content(node["content"], node["source_path"])
            for value in node.values():
                self.walk(value)
        elif isinstance(node, list):
            for value in node:
                self.walk(value)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        sys.exit(0)  # every renderer: the links are Markdown
    context, book = json.load(sys.stdin)
    root = context["root"]
    src = os.path.join(root, context["config"]["book"].get("src", "src"))
    repo_root = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    rewriter = Rewriter(src, repo_root, repository(repo_root), Rewriter.chapters_of(book))
    rewriter.walk(book)
    if rewriter.missing:
        for problem in rewriter.missing:
            print(f"mdbook-repo-links: {problem}", file=sys.stderr)
        sys.exit(1)
    json.dump(book, sys.stdout)


if __name__ == "__main__":
    main()
