# -*- coding: utf-8 -*-
"""Compare Autobahn|Testsuite fuzzingclient results with the pinned expectations.

    python compare.py --expected expected.json RUN=REPORTDIR... [--update]

Each RUN=REPORTDIR names a run (a key of the expected file, e.g. `default-limits`) and the
`outdir` wstest wrote for it (its index.json holds one entry per case). For every case the
behaviour, the closing behaviour and the close code the server sent are compared with the
expected file; any case that differs, is missing or is unexpected is printed, and the exit
status is 1. With --update the expected file is rewritten from these results instead.

Runs under Python 2.7 (the suite's virtualenv) and Python 3 alike.
"""

from __future__ import print_function

import argparse
import collections
import json
import sys

FIELDS = ('behavior', 'behaviorClose', 'remoteCloseCode')


def case_key(case):
    """'9.1.10' sorts after '9.1.9'."""
    return tuple(int(p) for p in case.split('.'))


def load_results(outdir):
    with open(outdir + '/index.json') as f:
        index = json.load(f)
    if len(index) != 1:
        sys.exit('compare: %s/index.json has %d agents, expected one' % (outdir, len(index)))
    cases = list(index.values())[0]
    return dict((case, dict((k, v.get(k)) for k in FIELDS)) for case, v in cases.items())


def render(expected):
    """The expected file: runs in order, one case per line, cases in numeric order."""
    lines = ['{']
    runs = list(expected.items())
    for i, (run, cases) in enumerate(runs):
        lines.append('  %s: {' % json.dumps(run))
        ordered = sorted(cases, key=case_key)
        for j, case in enumerate(ordered):
            row = json.dumps(collections.OrderedDict((k, cases[case][k]) for k in FIELDS))
            lines.append('    %s: %s%s' % (json.dumps(case), row, ',' if j < len(ordered) - 1 else ''))
        lines.append('  }%s' % (',' if i < len(runs) - 1 else ''))
    lines.append('}')
    return '\n'.join(lines) + '\n'


def show(result):
    if result is None:
        return '(not run)'
    return '%s / close %s / code %s' % (result['behavior'], result['behaviorClose'],
                                        result['remoteCloseCode'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--expected', required=True, help='the pinned expectations (JSON)')
    parser.add_argument('--update', action='store_true',
                        help='rewrite the expected file from these results')
    parser.add_argument('runs', nargs='+', metavar='RUN=REPORTDIR')
    args = parser.parse_args()

    results = collections.OrderedDict()
    for spec in args.runs:
        run, _, outdir = spec.partition('=')
        if not outdir:
            parser.error('%s: give RUN=REPORTDIR' % spec)
        results[run] = load_results(outdir)

    if args.update:
        with open(args.expected, 'w') as f:
            f.write(render(results))
        print('wrote %s' % args.expected)
        return 0

    with open(args.expected) as f:
        expected = json.load(f, object_pairs_hook=collections.OrderedDict)
    matched = differed = 0
    for run, got in results.items():
        want = expected.get(run)
        if want is None:
            sys.exit('compare: %s has no run %r' % (args.expected, run))
        counts = collections.Counter(r['behavior'] for r in got.values())
        print('%s: %d cases: %s' % (run, len(got), ', '.join(
            '%d %s' % (n, b) for b, n in sorted(counts.items()))))
        diffs = []
        for case in sorted(set(want) | set(got), key=case_key):
            if want.get(case) == got.get(case):
                matched += 1
            else:
                differed += 1
                diffs.append('  %-8s expected %s\n  %-8s      got %s' % (
                    case, show(want.get(case)), '', show(got.get(case))))
        if diffs:
            print('%s: %d cases differ from %s:' % (run, len(diffs), args.expected))
            print('\n'.join(diffs))
    # The closing line test.sh's summary picks up.
    print('autobahn: %d passed, %d failed' % (matched, differed))
    return 1 if differed else 0


if __name__ == '__main__':
    sys.exit(main())
