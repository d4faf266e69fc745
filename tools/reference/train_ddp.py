"""The user's baseline: nanochat's model trained with torch DDP over Gloo on CPUs.

One process per host (rank). Each step: grad_accum micro-batches per rank, DDP averages
gradients across ranks with Gloo's ring all-reduce during the last backward, then every
rank applies the same MuonAdamW step. Rank 0 prints one JSON line per step.
"""
import datetime
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import optim
from model import GPT, Config, init_weights
from runtime import peak_rss_mb, require_openblas

SHARD_MAGIC = b"RTSHARD\0"
SHARD_HEADER_BYTES = 64


class DataError(Exception):
    """The token file cannot be used; the message names the file and the fix."""


def open_tokens(path):
    """Token ids as a read-only uint16 array: a ringtrain shard (RTSHARD v1, doc offsets
    skipped) or a raw little-endian uint16 file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(SHARD_HEADER_BYTES)
    if head[:8] == SHARD_MAGIC:
        version, token_bytes = struct.unpack_from("<II", head, 8)
        _vocab, num_docs, num_tokens = struct.unpack_from("<QQQ", head, 16)
        if version != 1 or token_bytes != 2:
            raise DataError(f"{path}: shard version {version} with {token_bytes}-byte tokens; only v1 uint16 is read")
        offset = SHARD_HEADER_BYTES + 8 * (num_docs + 1)
        if offset + 2 * num_tokens != size:
            raise DataError(f"{path}: shard size {size} does not match its header; re-create the shard")
        return np.memmap(path, dtype="<u2", mode="r", offset=offset, shape=(num_tokens,))
    if size % 2:
        raise DataError(f"{path}: odd size {size} for a uint16 token file; pass raw little-endian uint16 tokens")
    return np.memmap(path, dtype="<u2", mode="r")


class RowReader:
    """Contiguous rows of T+1 tokens; inputs row[:-1], targets row[1:]. Row numbers wrap."""

    def __init__(self, tokens, seq_len, vocab_size, path):
        self.tokens, self.row_len = tokens, seq_len + 1
        self.num_rows = len(tokens) // self.row_len
        if self.num_rows == 0:
            raise DataError(f"{path}: {len(tokens)} tokens are fewer than one row of {self.row_len}; use more data")
        self.vocab_size, self.path = vocab_size, path

    def batch(self, first_row, count):
        rows = [(first_row + i) % self.num_rows for i in range(count)]
        data = np.stack([np.asarray(self.tokens[r * self.row_len:(r + 1) * self.row_len]) for r in rows])
        data = torch.from_numpy(data.astype(np.int64))
        if int(data.max()) >= self.vocab_size:
            raise DataError(f"{self.path}: token id {int(data.max())} >= vocab {self.vocab_size}; pass --vocab")
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()


class RandomReader:
    """Synthetic tokens (for throughput runs without data): same shapes, seeded per row."""

    def __init__(self, seq_len, vocab_size):
        self.seq_len, self.vocab_size = seq_len, vocab_size

    def batch(self, first_row, count):
        g = torch.Generator().manual_seed(first_row)
        data = torch.randint(0, self.vocab_size, (count, self.seq_len + 1), generator=g)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def train_ddp(args):
    torch.set_num_threads(args.threads)
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    if args.rank == 0:
        require_openblas()
    # PyTorch 2.x asks its TCPStore for libuv, which Debian 13's build lacks ("use_libuv was
    # requested but PyTorch was build without libuv support"); 1.13 has no such option.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        return _train(args)
    finally:
        dist.destroy_process_group()


def _train(args):
    world, rank = args.world_size, args.rank
    B, T = args.device_batch, args.seq_len
    tokens_per_micro = B * T * world
    total_batch = args.total_batch or tokens_per_micro
    if total_batch % tokens_per_micro:
        raise ValueError(f"--total-batch {total_batch} is not a multiple of device-batch*seq-len*world "
                         f"= {tokens_per_micro}; change one of them")
    accum = total_batch // tokens_per_micro
    cfg = Config.for_depth(args.depth, vocab_size=args.vocab, sequence_len=T)
    model = GPT(cfg)
    init_weights(model, args.seed)  # same seed everywhere; DDP also broadcasts rank 0's weights
    ddp = DistributedDataParallel(model)
    opt = optim.MuonAdamW(model.named_parameters(), cfg, total_batch, ref_head_dim=cfg.head_dim)
    reader = RowReader(open_tokens(args.data), T, args.vocab, args.data) if args.data else RandomReader(T, args.vocab)
    for step in range(args.steps):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(accum):
            first_row = ((step * accum + micro) * world + rank) * B  # ranks read disjoint rows
            idx, tgt = reader.batch(first_row, B)
            last = micro == accum - 1
            if last:
                loss, _ = ddp(idx, tgt)
                (loss / accum).backward()  # gradients all-reduced (averaged) here
            else:
                with ddp.no_sync():
                    loss, _ = ddp(idx, tgt)
                    (loss / accum).backward()
            loss_sum += loss.item()
        lrm, _, _ = opt.scheduled_step(step, args.steps)
        mean_loss = torch.tensor([loss_sum / accum])
        dist.all_reduce(mean_loss)
        step_s = time.perf_counter() - t0
        if rank == 0:
            print(json.dumps({"step": step, "loss": mean_loss.item() / world, "tok_per_s": total_batch / step_s,
                              "step_s": step_s, "lr_mult": lrm, "world_size": world,
                              "peak_rss_mb": peak_rss_mb()}), flush=True)
    return 0
