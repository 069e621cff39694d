#!/usr/bin/env bash
# The documentation site: build docs/ with mdBook, then check the result.
#
#   scripts/check-book.sh [--mdbook PATH]
#
# Fails when:
#   - mdbook fails: a page SUMMARY.md names is missing (create-missing is
#     off in docs/book.toml), a link leaving docs/ names no file of the
#     repository (scripts/mdbook-repo-links.py), a bad SUMMARY.md;
#   - a page of docs/ (tracked *.md) is not in SUMMARY.md, so not on the site;
#   - a link of the built site (href= and src= of every .html page) that
#     stays on the site names a file that was not built, or an anchor
#     (#id) the target page does not have.
# Links with a scheme (https:, the repository's web view) are not fetched:
# scripts/check-links.sh checks the Markdown links to the repository's files.
# Prints "book: N pages, M internal links resolve" on success. The site is
# built into docs/book/ (git-ignored).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MDBOOK=mdbook
if [ "${1:-}" = --mdbook ]; then
    MDBOOK=$2
fi

rm -rf docs/book
"$MDBOOK" build docs

mapfile -t pages < <(git ls-files 'docs/*.md' | grep -v '^docs/SUMMARY.md$')
python3 - docs/book docs/SUMMARY.md "${pages[@]}" <<'PY'
import html.parser
import os
import re
import sys
import urllib.parse

book, summary, pages = sys.argv[1], sys.argv[2], sys.argv[3:]
problems = []

# Every page of docs/ is in the table of contents.
listed = set(re.findall(r"\]\(([^)#\s]+)", open(summary, encoding="utf-8").read()))
for page in pages:
    name = os.path.relpath(page, "docs")
    if name not in listed:
        problems.append(f"{summary}: {name} is not in the table of contents")


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            if name in ("href", "src") and tag != "base":
                self.links.append((tag, value))


parsed = {}


def parse(path):
    if path not in parsed:
        p = Page()
        with open(path, encoding="utf-8") as f:
            p.feed(f.read())
        parsed[path] = p
    return parsed[path]


SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
html_files = []
for directory, _, files in os.walk(book):
    html_files += [os.path.join(directory, f) for f in files if f.endswith(".html")]
html_files.sort()

checked = 0
for path in html_files:
    for tag, link in parse(path).links:
        if SCHEME.match(link) or link.startswith("//"):
            continue
        checked += 1
        target, _, anchor = link.partition("#")
        target = urllib.parse.unquote(target.split("?", 1)[0])
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if os.path.isdir(resolved):
            resolved = os.path.join(resolved, "index.html")
        where = os.path.relpath(path, book)
        if not os.path.exists(resolved):
            problems.append(f"{where}: <{tag}> {link}: no such file on the site")
        elif anchor and resolved.endswith(".html"):
            anchor = urllib.parse.unquote(anchor)
            if anchor not in parse(resolved).ids:
                problems.append(f"{where}: <{tag}> {link}: no #{anchor} in {os.path.relpath(resolved, book)}")

for problem in problems:
    print(problem, file=sys.stderr)
if problems:
    print(f"book: {len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1)
print(f"book: {len(html_files)} pages, {checked} internal links resolve")
PY
