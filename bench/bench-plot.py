#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench-plot.py: picks the headline ratios out of `redislock-bench --json` output for
# bench-plot.gp, which draws them (`make bench-plot`).
#
# Every figure of the bench is measured next to a baseline of the same run, and its
# "ratio" is the figure over that baseline; a chart of those ratios means something on
# any machine, where the raw times do not. The figures charted are the README's
# headline rows, named here by section and figure; one that a run lacks (a section left
# out with --only, a figure that could not be measured) is left out of the chart.
# Prints one line per figure, tab-separated: the label, the ratio, 0 for a time or 1 for
# a rate, and what the ratio is against in the bench's words. With --subtitle, prints
# instead one line that names the run (machine, Redis, --quick) for the chart's title.

import json
import math
import sys

# (section, figure in the JSON, label on the chart, "time" or "rate": for a time lower
# is better, for a rate higher)
HEADLINES = [
    ("reentrant", "pair p50", "re-entrant lock+unlock / GRecMutex pair", "time"),
    ("uncontended", "pair p50", "uncontended lock+unlock / 2 raw calls", "time"),
    ("uncontended", "  the same, vs by hand", "uncontended lock+unlock / by hand", "time"),
    ("handoff", "  from the call, library over floor", "hand-off from the release call / raw floor", "time"),
    ("watchdog", "tick wall time", "watchdog tick, 10 000 leases / raw pipeline", "time"),
    ("independent", "pairs/s", "8 threads, 8 names / raw rate", "rate"),
    ("contention", "  vs hand-offs off", "8 threads, one name / hand-offs off", "rate"),
    ("processes", "sections/s", "4 processes, one name / raw protocol", "rate"),
]


def subtitle(run):
    machine = run.get("machine", {})
    redis = run.get("redis", {})
    parts = [f"{machine.get('nproc', '?')} CPUs ({machine.get('cpu') or 'unknown CPU'})",
             f"Redis {redis.get('version') or '?'}",
             f"redislock {run.get('version', '?')}"]
    if run.get("quick"):
        parts.append("--quick")
    return ", ".join(parts)


def main(argv):
    if len(argv) == 3 and argv[1] == "--subtitle":
        with open(argv[2], encoding="utf-8") as f:
            print(subtitle(json.load(f)))
        return
    if len(argv) != 2:
        sys.exit("usage: bench-plot.py [--subtitle] BENCH.json")
    with open(argv[1], encoding="utf-8") as f:
        run = json.load(f)
    figures = {}
    for section in run.get("sections", []):
        for fig in section.get("figures", []):
            figures[(section["name"], fig["figure"])] = fig
    n = 0
    for section, figure, label, kind in HEADLINES:
        fig = figures.get((section, figure))
        if fig is None:
            continue
        ratio = fig.get("ratio")
        if not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
            continue
        print(f"{label}\t{ratio:.4g}\t{1 if kind == 'rate' else 0}\t{fig.get('ratio_to') or ''}")
        n += 1
    if n == 0:
        sys.exit(f"bench-plot.py: no headline figure in {argv[1]}")


if __name__ == "__main__":
    main(sys.argv)
