#!/usr/bin/env bash
# Every relative link in the repository's Markdown resolves:
#   - [text](path), [text](path#anchor), [label]: path, and href="path":
#     the file or directory exists (relative to the page);
#   - an anchor (#heading, in the same page or another .md page) names a
#     heading of that page, slugged as GitHub does.
# Links with a scheme (https:, mailto:) are not fetched. Fenced code blocks
# and `inline code` are skipped. Pages: every tracked *.md file, or the files
# given as arguments. Exits non-zero with each broken link as file:line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "$#" -gt 0 ]; then
    pages=("$@")
else
    mapfile -t pages < <(git ls-files '*.md')
fi

python3 - "${pages[@]}" <<'PY'
import os
import re
import sys

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?$")
HREF = re.compile(r"""href=["']([^"']+)["']""")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def lines(path):
    """(line number, line) of the page outside fenced code blocks."""
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


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


anchors_of = {}


def anchors(path):
    """Every anchor a page defines: its headings' slugs, <a name|id>."""
    if path not in anchors_of:
        seen = {}
        names = set()
        for _, line in lines(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                names.add(base if count == 0 else f"{base}-{count}")
            names.update(re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", line))
        anchors_of[path] = names
    return anchors_of[path]


def links(path):
    """(line number, target) of every link of the page, inline code skipped."""
    for number, line in lines(path):
        line = re.sub(r"`+[^`]*`+", "``", line)
        for m in INLINE.finditer(line):
            yield number, m.group(1)
        for m in HREF.finditer(line):
            yield number, m.group(1)
        m = REFERENCE.match(line)
        if m:
            yield number, m.group(1)


broken = 0
checked = 0
for page in sys.argv[1:]:
    for number, target in links(page):
        if SCHEME.match(target) or target.startswith("//"):
            continue
        checked += 1
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
        problem = None
        if not os.path.exists(resolved):
            problem = "no such file"
        elif anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if anchor.lower() not in anchors(resolved):
                problem = f"no heading #{anchor} in {resolved}"
        if problem:
            broken += 1
            print(f"{page}:{number}: {target}: {problem}", file=sys.stderr)

pages = len(sys.argv) - 1
if broken:
    print(f"{broken} broken link(s) in {pages} pages", file=sys.stderr)
    sys.exit(1)
print(f"{checked} relative links in {pages} pages resolve")
PY
