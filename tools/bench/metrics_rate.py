#!/usr/bin/python3
"""Throughput of a training run, for the benchmark scripts:

    /usr/bin/python3 tools/bench/metrics_rate.py METRICS.jsonl|STDOUT.log WARMUP [COUNT]

prints "TOK_PER_S COMM_S": tokens / time over the step records after the first WARMUP (the
next COUNT of them when given, e.g. to leave out the wait for the last average), and
the mean network time per step not hidden by compute. Tokens / time come from rank 0's
clock: between the times at which every rank had finished the two steps (synced_s, taken
when the ranks' step reports met) where both records have it, else between rank 0's own
ends of those steps (elapsed_s; with avg the ranks run free between syncs, so per-step
times say little, and a rank that fell behind during the warm-up would put its lag into
the window), else the harmonic mean of the per-step rates (PyTorch's JSON-lines output).
Prints "-" when there are no records after the warm-up.
"""
import json, sys, statistics
recs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        if "tok_per_s" in r and "val_bpb" not in r:
            recs.append(r)
warm = int(sys.argv[2])
before, recs = recs[warm - 1] if warm > 0 else None, recs[warm:]
if len(sys.argv) > 3:
    recs = recs[:int(sys.argv[3])]
if not recs:
    print("-"); sys.exit()
if before and "synced_s" in before and "synced_s" in recs[-1]:
    rate = (recs[-1]["tokens"] - before["tokens"]) / (recs[-1]["synced_s"] - before["synced_s"])
elif before and "elapsed_s" in before:
    rate = (recs[-1]["tokens"] - before["tokens"]) / (recs[-1]["elapsed_s"] - before["elapsed_s"])
else:
    rate = statistics.harmonic_mean([r["tok_per_s"] for r in recs])
print("%.1f %.2f" % (rate, statistics.mean(r.get("comm_s", 0) for r in recs)))
