#!/usr/bin/env python3
"""Whether a card-count job's output is exact: card-count-verdict.py <output.tsv> <events> <cards>

The input of the demo and the e2e scenario is event i for card-((i * 7919) % cards), so an
uninterrupted run outputs, for every card, the counts 1, 2, ..., n with n its events: no loss, no
duplicate. <output.tsv> holds the output topic read with read_committed, one `key<TAB>value` a
line. Prints the verdict as one JSON line, and exits 1 when the output is not exact."""

import collections
import json
import sys


def verdict(path, total, cards):
    expected = collections.Counter(f"card-{(i * 7919) % cards}" for i in range(total))
    seen = collections.defaultdict(list)
    with open(path) as output:
        for line in output:
            key, value = line.rstrip("\n").split("\t", 1)
            seen[key].append(json.loads(value)["count"])
    bad = [k for k in expected if seen.get(k) != list(range(1, expected[k] + 1))]
    extra = set(seen) - set(expected)
    return {"cards": len(expected), "events": total,
            "output_records": sum(len(v) for v in seen.values()),
            "exact": not bad and not extra, "wrong_cards": sorted(bad)[:5]}


if __name__ == "__main__":
    found = verdict(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(found))
    sys.exit(0 if found["exact"] else 1)
