"""Forward+backward (and optionally MuonAdamW) throughput of the PyTorch reference.

What a user's plain PyTorch run does: float32, no compile, no anomaly mode, torch's own
thread pool set to --threads. Random tokens, nanochat's initialisation.
"""
import json
import sys
import time

import torch

import optim
from model import GPT, Config, init_weights
from runtime import peak_rss_mb, require_openblas


def run_bench(depth, device_batch, seq_len, threads, steps, warmup, optimizer, as_json, vocab_size=32768, seed=0):
    torch.set_num_threads(threads)
    require_openblas()
    cfg = Config.for_depth(depth, vocab_size=vocab_size, sequence_len=seq_len)
    model = GPT(cfg)
    init_weights(model, seed)
    model.train()
    gen = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(0, vocab_size, (device_batch, seq_len), generator=gen)
    tgt = torch.randint(0, vocab_size, (device_batch, seq_len), generator=gen)
    opt = optim.MuonAdamW(model.named_parameters(), cfg, device_batch * seq_len) if optimizer == "muonadamw" else None
    total = warmup + steps
    records = []
    for it in range(total):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss, _ = model(idx, tgt)
        loss.backward()
        if opt is not None:
            opt.scheduled_step(it, max(total, 1))
        step_s = time.perf_counter() - t0
        if it < warmup:
            continue
        rec = {"impl": "pytorch", "step": it - warmup, "tok_per_s": device_batch * seq_len / step_s,
               "step_s": step_s, "peak_rss_mb": peak_rss_mb(), "loss": loss.item(),
               "depth": depth, "device_batch": device_batch, "seq_len": seq_len, "threads": threads,
               "optimizer": optimizer}
        records.append(rec)
        if as_json:
            print(json.dumps(rec), flush=True)
        else:
            print(f"step {rec['step']}: {rec['tok_per_s']:.1f} tok/s, {step_s:.3f} s/step, "
                  f"loss {rec['loss']:.4f}, peak RSS {rec['peak_rss_mb']:.0f} MB", flush=True)
    if records and not as_json:
        mean = sum(r["tok_per_s"] for r in records) / len(records)
        print(f"mean {mean:.1f} tok/s over {len(records)} steps", file=sys.stderr)
    return records
