#!/usr/bin/python3
"""torch.distributed (Gloo) all_reduce bandwidth, measured like `ringtrain bench allreduce`.

One process per rank:
    /usr/bin/python3 tools/bench/bench_allreduce_gloo.py --rank R --world N --master HOST:PORT \
        [--sizes 4K,...,256M] [--iters K] [--json]
Rank 0 hosts the rendezvous store on HOST:PORT. Gloo itself then connects its ranks
through ephemeral ports. In network namespaces set --ifname (GLOO_SOCKET_IFNAME), or Gloo
resolves the host name to 127.0.0.1. Prints one JSON object per size from rank 0 with
bytes, time_s (median), algbw_MBps and busbw_MBps (nccl-tests definitions, MB = 10^6 B).
Every run's result is checked (integer-valued inputs, exact sums). Size 0 times
dist.barrier() (what `ringtrain bench allreduce` times for 0: its barrier is an all-reduce of
nothing), for the small-message latency table.
"""
import argparse
import datetime
import json
import os
import sys
import time


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    num = text.rstrip("KMGB")
    return int(float(num) * units[text[len(num):]])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0's rendezvous store")
    ap.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M,256M")
    ap.add_argument("--iters", type=int, default=0, help="timed runs per size (0: by size)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ifname", default="", help="GLOO_SOCKET_IFNAME (network interface to use)")
    ap.add_argument("--timeout", type=float, default=600, help="rendezvous timeout, seconds")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # PyTorch 2.x asks its TCPStore for libuv, which Debian 13's build lacks ("use_libuv was
    # requested but PyTorch was build without libuv support"); 1.13 has no such option.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    n_ranks = a.world
    if a.rank == 0 and not a.json:
        print("# gloo all_reduce, %d ranks, torch %s (MB = 10^6 bytes)" % (n_ranks, torch.__version__))
        print("%14s %10s %12s %12s %6s" % ("bytes", "time_ms", "algbw_MBps", "busbw_MBps", "iters"))
    for size in [parse_size(s) for s in a.sizes.split(",")]:
        n = size // 4
        iters = a.iters or (20 if size <= 2 ** 20 else 10 if size <= 16 * 2 ** 20 else 5)
        pattern = (torch.arange(n, dtype=torch.int32) % 17).to(torch.float32)  # cheap to build at 256 MB
        times = []
        for it in range(a.warmup + iters):
            def values(rank):
                # Integers in [-8, 8]: every sum is exact in float32.
                return torch.remainder(pattern + float(rank * 5 + it * 3), 17.0) - 8.0
            buf = values(a.rank)
            dist.barrier()
            t0 = time.perf_counter()
            if n:
                dist.all_reduce(buf)
            else:
                dist.barrier()
            t1 = time.perf_counter()
            want = sum(values(r) for r in range(n_ranks))
            if n and not torch.equal(buf, want):
                sys.exit("gloo: wrong all_reduce result at %d bytes" % size)
            if it >= a.warmup:
                times.append(t1 - t0)
        times.sort()
        t = times[len(times) // 2]
        algbw = n * 4 / t / 1e6
        busbw = algbw * 2 * (n_ranks - 1) / n_ranks
        if a.rank == 0:
            if a.json:
                print(json.dumps({"bytes": n * 4, "time_s": t, "algbw_MBps": round(algbw, 2), "busbw_MBps": round(busbw, 2),
                                  "ranks": n_ranks, "wire": "f32", "impl": "gloo", "iters": iters, "correct": True}))
            else:
                print("%14d %10.3f %12.1f %12.1f %6d" % (n * 4, t * 1e3, algbw, busbw, iters))
            sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
