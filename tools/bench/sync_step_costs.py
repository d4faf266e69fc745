#!/usr/bin/env python3
"""What the parameter averages cost a rank's steps, from a run's metrics.jsonl.

    sync_step_costs.py RUN_DIR EVERY OVERLAP_STEPS FRAGMENTS FIRST LAST [RANK]

Sorts the steps FIRST+1 .. LAST by what the averaging schedule did in them (fragment i of F
starts at the steps s with s mod H = i*H/F and is applied OVERLAP_STEPS later), and prints
one line: rank RANK's (default 0) mean step time of each kind, and the seconds per H steps
the averages cost on top of plain steps. The step records carry every rank's own step time
(its compute plus whatever of the sync it did on its core).
"""
import json
import statistics
import sys


def due(step, every, fragments):
    return any(i * every // fragments == step % every for i in range(fragments))


def main():
    run, every, overlap, fragments, first, last = sys.argv[1], *map(int, sys.argv[2:7])
    rank = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    kinds = {}
    for line in open(f"{run}/metrics.jsonl"):
        r = json.loads(line)
        if "ranks" not in r or not (first < r["step"] <= last):
            continue
        mine = [x for x in r["ranks"] if x["rank"] == rank]
        if not mine:
            continue
        s = r["step"]
        starts, applies = due(s, every, fragments), due(s - overlap, every, fragments) and s - overlap > 0
        kind = "starts and applies" if starts and applies else "starts" if starts else "applies" if applies else "plain"
        kinds.setdefault(kind, []).append(mine[0]["step_s"])
    if not kinds:
        print(f"- {run.rsplit('/', 1)[-1]}: no step records of rank {rank} between {first} and {last}")
        return
    parts = ", ".join(f"{k} {statistics.mean(v):.2f} s (x{len(v)})" for k, v in sorted(kinds.items()))
    if "plain" not in kinds:  # e.g. 4 fragments in 8 steps, each applied 1 step later: every step does something
        print(f"- {run.rsplit('/', 1)[-1]}, rank {rank}: {parts}; no plain step to compare with")
        return
    plain = statistics.mean(kinds["plain"])
    periods = (last - first) / every
    extra = sum((statistics.mean(v) - plain) * len(v) for k, v in kinds.items() if k != "plain") / periods
    print(f"- {run.rsplit('/', 1)[-1]}, rank {rank}: {parts}; the averages add {extra:.2f} s per {every} steps "
          f"({100 * extra / (plain * every):.1f}% of {every} plain steps)")


if __name__ == "__main__":
    main()
