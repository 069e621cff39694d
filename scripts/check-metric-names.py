"""Every metric the alert rules, the Grafana dashboard and the docs name
exists in a real scrape, and every family a scrape exports is documented.

    python3 scripts/check-metric-names.py --used R.yml [--used …] \
        --dashboard D.json --documented docs/monitoring.md \
        SCRAPE.prom [SCRAPE.prom …]

A name is any `herald_*` or `process_*` word in a `--used` file (rules,
their tests, the docs: expressions, series and prose alike) or in a
dashboard target's expression. It exists when a scrape has a sample of
that name (so a histogram's `_bucket`, `_sum` and `_count` count) or a
`# TYPE` line for it, or is given as `--lazy` (a family whose series
appear with their first event, which the scraped processes did not have).
A family (a `# TYPE` line) is documented when the
`--documented` page names it, with or without its `_total` or histogram
suffix. Prints what is missing and where; exits 1 if anything is.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

NAME = re.compile(r"\b(?:herald|process)_[a-zA-Z0-9_]*[a-zA-Z0-9]")


SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_info")


def exported(scrape: str) -> tuple[set[str], set[str]]:
    """(every name a sample or a TYPE line has, the TYPE lines' families)"""
    names, families = set(), set()
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
            families.add(family)
            # The 0.0.4 text names a counter family by its samples
            # (herald_x_total): its OpenMetrics name is exported too.
            if line.split()[3:] == ["counter"] and family.endswith("_total"):
                names.add(family[: -len("_total")])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names | families, families


def dashboard_exprs(dashboard: dict):
    for panel in dashboard.get("panels", []):
        yield from dashboard_exprs(panel)
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), target.get("expr", "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--used", action="append", default=[])
    ap.add_argument("--dashboard", action="append", default=[])
    ap.add_argument("--documented")
    ap.add_argument("--lazy", action="append", default=[],
                    help="a name that appears with its first event: taken as exported")
    ap.add_argument("scrapes", nargs="+")
    args = ap.parse_args()

    have: set[str] = set()
    families: set[str] = set()
    for path in args.scrapes:
        with open(path) as f:
            names, fams = exported(f.read())
        have |= names
        families |= fams
    # A scrape this small means the scrape failed, not that names are missing.
    if len(have) < 20:
        print(f"only {len(have)} names scraped from {args.scrapes}", file=sys.stderr)
        return 1

    used: dict[str, set[str]] = {}
    for path in args.used:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                for name in NAME.findall(line):
                    used.setdefault(name, set()).add(f"{path}:{n}")
    for path in args.dashboard:
        with open(path) as f:
            dashboard = json.load(f)
        for title, expr in dashboard_exprs(dashboard):
            for name in NAME.findall(expr):
                used.setdefault(name, set()).add(f"{path}: panel {title!r}")

    missing = sorted(n for n in used if n not in have and n not in args.lazy)
    for name in missing:
        print(f"not exported: {name} (used in {', '.join(sorted(used[name]))})")
    print(f"{len(used)} metric names used, {len(used) - len(missing)} exported, {len(missing)} missing")

    undocumented = []
    if args.documented:
        with open(args.documented) as f:
            said = set(NAME.findall(f.read()))
        undocumented = sorted(
            fam for fam in families if not any(fam + s in said for s in SUFFIXES))
        for fam in undocumented:
            print(f"not documented in {args.documented}: {fam}")
        print(f"{len(families)} families exported, {len(undocumented)} undocumented")
    return 1 if missing or undocumented else 0


if __name__ == "__main__":
    sys.exit(main())
