#!/usr/bin/python3
"""PyTorch reference of nanochat's base model and MuonAdamW, as a command-line program.

Subcommands: fwdbwd, init, optim, bench, train-ddp (see README.md in this folder).
Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad input.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import safetensors_io  # noqa: E402
from model import GPT, Config, init_weights  # noqa: E402
import optim  # noqa: E402
from runtime import BlasError  # noqa: E402


class UsageError(Exception):
    """Bad flags or bad input files: exit code 2."""


DTYPES = {"float32": torch.float32, "float64": torch.float64}


def load_config(path):
    try:
        return Config.from_json(path)
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"cannot read config {path}: {e}")


def load_tensors(path):
    try:
        return safetensors_io.load(path)
    except (OSError, safetensors_io.SafetensorsError) as e:
        raise UsageError(f"cannot read {path}: {e}")


def load_model(cfg, weights_path, dtype):
    """GPT with every parameter taken from a safetensors file (all keys must be present)."""
    model = GPT(cfg)
    tensors = load_tensors(weights_path)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    if missing:
        raise UsageError(f"{weights_path} lacks parameters {missing[:4]}...; export every nanochat state_dict key")
    with torch.no_grad():
        for name, p in params.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise UsageError(f"{weights_path}: {name} has shape {list(t.shape)}, config needs {list(p.shape)}; check the config")
            p.copy_(torch.from_numpy(np.asarray(t, dtype=np.float64)))
    return model.to(dtype)


def as_numpy(t, dtype):
    return t.detach().to(dtype).cpu().numpy()


# ----------------------------------------------------------------------------- fwdbwd

def cmd_fwdbwd(args):
    cfg = load_config(args.config)
    dtype = DTYPES[args.dtype]
    model = load_model(cfg, args.weights, dtype)
    batch = load_tensors(args.batch)
    for k in ("idx", "tgt"):
        if k not in batch:
            raise UsageError(f"{args.batch} lacks tensor '{k}'; write idx and tgt as int64 [B,T]")
    idx = torch.from_numpy(batch["idx"].astype(np.int64))
    tgt = torch.from_numpy(batch["tgt"].astype(np.int64))
    if idx.ndim != 2 or idx.shape != tgt.shape:
        raise UsageError(f"{args.batch}: idx {list(idx.shape)} and tgt {list(tgt.shape)} must both be [B,T]")
    if int(idx.min()) < 0 or int(idx.max()) >= cfg.vocab_size or int(tgt.max()) >= cfg.vocab_size or int(tgt.min()) < -1:
        raise UsageError(f"{args.batch}: token ids outside [0,{cfg.vocab_size}) (tgt may be -1); fix the batch")
    loss, losses = model(idx, tgt)
    loss.backward()
    out = {"loss": as_numpy(loss.reshape(1), dtype), "losses": as_numpy(losses, dtype)}
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = as_numpy(g, dtype)
    safetensors_io.save(args.out, out)
    print(f"loss {loss.item():.6f} tokens {int((tgt != -1).sum())}", file=sys.stderr)


# ----------------------------------------------------------------------------- init

def cmd_init(args):
    cfg = load_config(args.config)
    model = GPT(cfg)
    init_weights(model, args.seed)
    safetensors_io.save(args.out, {k: as_numpy(p, torch.float32) for k, p in model.named_parameters()})


# ----------------------------------------------------------------------------- optim

def grad_steps(grads, names, path):
    """Split "step{i}.<key>" tensors into a list of {key: tensor}, one per step."""
    steps = {}
    for full, arr in grads.items():
        head, _, key = full.partition(".")
        if not head.startswith("step") or not head[4:].isdigit() or not key:
            raise UsageError(f"{path}: tensor {full} is not named step<i>.<key>; rename it")
        steps.setdefault(int(head[4:]), {})[key] = torch.from_numpy(arr.astype(np.float32))
    if not steps or sorted(steps) != list(range(len(steps))):
        raise UsageError(f"{path}: steps must be step0..stepN-1 without gaps, found {sorted(steps)[:8]}")
    for i in range(len(steps)):
        missing = sorted(set(names) - set(steps[i]))
        if missing:
            raise UsageError(f"{path}: step{i} lacks gradients {missing[:4]}; give one per parameter")
    return [steps[i] for i in range(len(steps))]


def cmd_optim(args):
    cfg = load_config(args.config)
    model = load_model(cfg, args.weights, torch.float32)
    params = dict(model.named_parameters())
    steps = grad_steps(load_tensors(args.grads), params, args.grads)
    if args.num_iterations < 1 or args.start_step < 0 or args.start_step + len(steps) > args.num_iterations:
        raise UsageError(f"steps {args.start_step}..{args.start_step + len(steps) - 1} do not fit in "
                         f"--num-iterations {args.num_iterations}; raise it or lower --start-step")
    if args.total_batch <= 0:
        raise UsageError("--total-batch must be a positive token count")
    for name, p in params.items():
        for i, g in enumerate(steps):
            if tuple(g[name].shape) != tuple(p.shape):
                raise UsageError(f"{args.grads}: step{i}.{name} has shape {list(g[name].shape)}, parameter is {list(p.shape)}")
    opt = optim.MuonAdamW(params.items(), cfg, args.total_batch)
    out = {}
    for i, grads in enumerate(steps):
        lrm, mom, wd = opt.scheduled_step(args.start_step + i, args.num_iterations, grads)
        for name, p in params.items():
            out[f"step{i}.{name}"] = as_numpy(p, torch.float32).copy()  # a snapshot, not a view of the live tensor
        out[f"step{i}.lr_mult"] = np.array([lrm], dtype=np.float32)
        out[f"step{i}.muon_momentum"] = np.array([mom], dtype=np.float32)
        out[f"step{i}.muon_wd"] = np.array([wd], dtype=np.float32)
    safetensors_io.save(args.out, out)


# ----------------------------------------------------------------------------- bench

def positive(name, value):
    if value <= 0:
        raise UsageError(f"--{name} must be positive, got {value}")


def cmd_bench(args):
    import bench
    for name in ("depth", "device_batch", "seq_len", "threads", "steps"):
        positive(name.replace("_", "-"), getattr(args, name))
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    bench.run_bench(args.depth, args.device_batch, args.seq_len, args.threads, args.steps, args.warmup,
                    args.optimizer, args.json, vocab_size=args.vocab)


# ----------------------------------------------------------------------------- train-ddp

def cmd_train_ddp(args):
    import train_ddp
    for name in ("depth", "device_batch", "seq_len", "threads", "steps", "world_size", "timeout"):
        positive(name.replace("_", "-"), getattr(args, name))
    if not 0 <= args.rank < args.world_size:
        raise UsageError(f"--rank {args.rank} is outside 0..{args.world_size - 1}; fix --rank or --world-size")
    if args.data and not os.path.isfile(args.data):
        raise UsageError(f"--data {args.data} is not a file; pass a token shard or raw uint16 file")
    try:
        train_ddp.train_ddp(args)
    except (train_ddp.DataError, ValueError) as e:
        raise UsageError(str(e))


# ----------------------------------------------------------------------------- main

def build_parser():
    ap = argparse.ArgumentParser(prog="nanochat_ref.py", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("fwdbwd", help="loss, per-token losses and gradients of one batch")
    p.add_argument("--config", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.set_defaults(func=cmd_fwdbwd)

    p = sub.add_parser("init", help="nanochat initialisation to a safetensors file")
    p.add_argument("--config", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("optim", help="MuonAdamW steps on given gradients, with the spec's schedules")
    p.add_argument("--config", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--grads", required=True, help="step<i>.<key> gradients, one set per step")
    p.add_argument("--num-iterations", type=int, required=True, help="N of the schedules")
    p.add_argument("--total-batch", type=int, required=True, help="tokens per optimizer step")
    p.add_argument("--start-step", type=int, default=0, help="schedule index of the first step")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_optim)

    p = sub.add_parser("bench", help="forward+backward (+optimizer) throughput, one JSON line per step")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--device-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--optimizer", choices=["none", "muonadamw"], default="none")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("train-ddp", help="baseline training with torch DDP + Gloo, one process per rank")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--ifname", default="", help="sets GLOO_SOCKET_IFNAME (needed in network namespaces)")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--device-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--total-batch", type=int, default=0, help="tokens per step (default: one micro-batch per rank)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default="", help="ringtrain shard or raw uint16 tokens; random tokens if omitted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=300, help="seconds to wait for peers")
    p.set_defaults(func=cmd_train_ddp)
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)  # argparse exits with code 2 on bad flags
    torch.set_num_threads(getattr(args, "threads", None) or int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        args.func(args)
    except (UsageError, BlasError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
