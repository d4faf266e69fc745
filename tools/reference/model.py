"""nanochat base GPT, written out op by op from the nanochat model specification.

PyTorch 1.13 has no F.rms_norm and no F.scaled_dot_product_attention, so both are
written here. Parameter names match nanochat's state_dict keys exactly.
"""
import json
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

NORM_EPS = 1.1920928955078125e-07  # float32 machine epsilon, also used in float64 runs
ROPE_BASE = 100000.0
SMEAR_DIM = 24     # smear gate reads the first 24 channels of the token
VE_GATE_DIM = 12   # value-embedding gate reads the first 12 channels of norm(x)
QK_SCALE = 1.2     # q and k are multiplied by this after their RMSNorm
SOFTCAP = 15.0


@dataclass
class Config:
    n_layer: int
    n_embd: int
    n_head: int
    n_kv_head: int
    head_dim: int
    vocab_size: int
    sequence_len: int
    window_pattern: str = "SSSL"
    windows: Optional[List[int]] = None

    @staticmethod
    def for_depth(depth, vocab_size=32768, sequence_len=1024):
        """nanochat's dN: C = 64 N rounded up to whole heads of 128, H = KV = C / 128."""
        n_embd = -(-64 * depth // 128) * 128
        n_head = n_embd // 128
        return Config(depth, n_embd, n_head, n_head, 128, vocab_size, sequence_len)

    @staticmethod
    def from_json(path):
        with open(path) as f:
            d = json.load(f)
        known = {k: d[k] for k in Config.__dataclass_fields__ if k in d}
        missing = [k for k in ("n_layer", "n_embd", "n_head", "n_kv_head", "head_dim",
                               "vocab_size", "sequence_len") if k not in known]
        if missing:
            raise ValueError(f"{path}: config lacks {missing}; add them to the JSON")
        return Config(**known)

    def layer_windows(self):
        """Per-layer attention window (keys t-window..t are visible)."""
        if self.windows is not None:
            if len(self.windows) != self.n_layer:
                raise ValueError(f"config windows has {len(self.windows)} entries, n_layer is {self.n_layer}; give one per layer")
            return [int(w) for w in self.windows]
        T = self.sequence_len
        short = math.ceil((T / 4) / 128) * 128
        sizes = {"L": T, "S": short}
        pattern = self.window_pattern.upper()
        out = [sizes[pattern[i % len(pattern)]] for i in range(self.n_layer)]
        out[-1] = T  # the last layer always sees the full context
        return out

    def has_value_embed(self, i):
        return i % 2 == (self.n_layer - 1) % 2

    def backout_layer(self):
        return self.n_layer // 2


# ----------------------------------------------------------------------------- ops

def rms_norm(x):
    """RMSNorm over the last dim, no learnable weight."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS)


def rotary_tables(T, head_dim, dtype):
    """cos/sin of shape (T, D/2). inv_freq is 100000^(-2j/D) rounded once to float32, and the
    angle position*inv_freq is a float32 product (as the spec says); cos/sin are then taken
    in the run's dtype (so float64 runs see the same angles as float32 ones)."""
    j = torch.arange(0, head_dim, 2, dtype=torch.float64)
    inv_freq = (1.0 / (ROPE_BASE ** (j / head_dim))).to(torch.float32)
    pos = torch.arange(T, dtype=torch.float32)
    angle = torch.outer(pos, inv_freq).to(dtype)
    return angle.cos(), angle.sin()


def apply_rotary(x, cos, sin):
    """x: (B, T, heads, D), half-split layout: y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c + x2 * s, x2 * c - x1 * s], dim=-1)


def window_mask(T, window, device=None):
    """Boolean (T, T) mask, True where query t may see key j: t - window <= j <= t."""
    t = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= t) & (j >= t - window)


def attention(q, k, v, allowed):
    """Softmax attention. q: (B, H, T, D); k, v: (B, KV, T, D); allowed: (T, T) bool."""
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:  # grouped-query: each kv head serves n_rep query heads
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def smear(x, gate_weight, smear_lambda):
    """Token t >= 1 adds g_t * x[t-1], g_t = lambda * sigmoid(w . x[t, :24]); uses pre-smear values."""
    g = smear_lambda * torch.sigmoid(F.linear(x[:, 1:, :SMEAR_DIM], gate_weight))  # (B, T-1, 1)
    return torch.cat([x[:, :1], x[:, 1:] + g * x[:, :-1]], dim=1)


def softcap(logits):
    return SOFTCAP * torch.tanh(logits / SOFTCAP)


# ----------------------------------------------------------------------------- modules

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        C, D = cfg.n_embd, cfg.head_dim
        self.c_q = nn.Linear(C, cfg.n_head * D, bias=False)
        self.c_k = nn.Linear(C, cfg.n_kv_head * D, bias=False)
        self.c_v = nn.Linear(C, cfg.n_kv_head * D, bias=False)
        self.c_proj = nn.Linear(cfg.n_head * D, C, bias=False)
        self.ve_gate = nn.Linear(VE_GATE_DIM, cfg.n_kv_head, bias=False) if cfg.has_value_embed(layer) else None

    def forward(self, u, ve, cos, sin, allowed):
        B, T, _ = u.shape
        q = self.c_q(u).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(u).view(B, T, self.n_kv_head, self.head_dim)
        v = self.c_v(u).view(B, T, self.n_kv_head, self.head_dim)
        if ve is not None:
            gate = 3.0 * torch.sigmoid(self.ve_gate(u[..., :VE_GATE_DIM]))  # (B, T, KV)
            v = v + gate[..., None] * ve.view(B, T, self.n_kv_head, self.head_dim)
        q = rms_norm(apply_rotary(q, cos, sin)) * QK_SCALE
        k = rms_norm(apply_rotary(k, cos, sin)) * QK_SCALE
        y = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), allowed)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attn = CausalSelfAttention(cfg, layer)
        self.mlp = MLP(cfg)

    def forward(self, x, ve, cos, sin, allowed):
        x = x + self.attn(rms_norm(x), ve, cos, sin, allowed)
        return x + self.mlp(rms_norm(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        L = cfg.n_layer
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(cfg.vocab_size, cfg.n_embd),
            "h": nn.ModuleList([Block(cfg, i) for i in range(L)]),
        })
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.value_embeds = nn.ModuleDict({
            str(i): nn.Embedding(cfg.vocab_size, cfg.n_kv_head * cfg.head_dim)
            for i in range(L) if cfg.has_value_embed(i)})
        self.resid_lambdas = nn.Parameter(torch.ones(L))
        self.x0_lambdas = nn.Parameter(torch.zeros(L))
        self.smear_gate = nn.Linear(SMEAR_DIM, 1, bias=False)
        self.smear_lambda = nn.Parameter(torch.zeros(1))
        self.backout_lambda = nn.Parameter(torch.zeros(1))
        self.windows = cfg.layer_windows()
        self._mask_cache = {}

    def masks(self, T, device):
        key = (T, str(device))
        if key not in self._mask_cache:
            self._mask_cache[key] = [window_mask(T, w, device) for w in self.windows]
        return self._mask_cache[key]

    def forward_logits(self, idx):
        """Softcapped logits (B, T, V) in the parameters' dtype."""
        cfg = self.config
        B, T = idx.shape
        dtype = self.lm_head.weight.dtype
        cos, sin = rotary_tables(T, cfg.head_dim, dtype)
        allowed = self.masks(T, idx.device)
        x = rms_norm(self.transformer["wte"](idx))
        x = smear(x, self.smear_gate.weight, self.smear_lambda)
        x0 = x
        x_backout = None
        for i, block in enumerate(self.transformer["h"]):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if cfg.has_value_embed(i) else None
            x = block(x, ve, cos, sin, allowed[i])
            if i == cfg.backout_layer():
                x_backout = x
        x = rms_norm(x - self.backout_lambda * x_backout)
        return softcap(self.lm_head(x))

    def forward(self, idx, tgt):
        """Returns (mean loss over tgt != -1, per-token losses (B*T) with 0 where ignored)."""
        logits = self.forward_logits(idx)
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                 ignore_index=-1, reduction="none")
        count = (tgt != -1).sum()
        return losses.sum() / count, losses


# ----------------------------------------------------------------------------- init

@torch.no_grad()
def init_weights(model, seed):
    """nanochat's initialisation (spec table). Draw order is fixed (state_dict order)."""
    cfg = model.config
    gen = torch.Generator().manual_seed(int(seed))
    C, L = cfg.n_embd, cfg.n_layer
    s = math.sqrt(3.0) / math.sqrt(C)

    def uniform(p, lo, hi):
        p.copy_(torch.rand(p.shape, generator=gen, dtype=torch.float64).mul_(hi - lo).add_(lo).to(p.dtype))

    def normal(p, std):
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).mul_(std).to(p.dtype))

    for name, p in model.named_parameters():
        if name == "transformer.wte.weight":
            normal(p, 0.8)
        elif name == "lm_head.weight":
            normal(p, 0.001)
        elif name.startswith("value_embeds."):
            uniform(p, -s, s)
        elif name.endswith(("attn.c_q.weight", "attn.c_k.weight", "attn.c_v.weight")):
            uniform(p, -s, s)
        elif name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")):
            p.zero_()
        elif name.endswith("attn.ve_gate.weight") or name == "smear_gate.weight":
            uniform(p, 0.0, 0.02)
        elif name.endswith("mlp.c_fc.weight"):
            uniform(p, -0.4 * s, 0.4 * s)
        elif name == "resid_lambdas":
            p.copy_(torch.tensor([1.15 - 0.10 * i / max(L - 1, 1) for i in range(L)]))
        elif name == "x0_lambdas":
            p.copy_(torch.tensor([0.20 - 0.15 * i / max(L - 1, 1) for i in range(L)]))
        elif name == "smear_lambda":
            p.zero_()
        elif name == "backout_lambda":
            p.fill_(0.2)
        else:
            raise RuntimeError(f"init_weights: no rule for parameter {name}; add one")


# ----------------------------------------------------------------------------- counting

def meta_model(cfg):
    """The model with every parameter on the meta device (no memory), for counting shapes."""
    old = torch.nn.Module.register_parameter

    def to_meta(self, name, param):
        if param is not None:
            param = nn.Parameter(torch.empty(param.shape, device="meta", dtype=param.dtype), param.requires_grad)
        return old(self, name, param)
    torch.nn.Module.register_parameter = to_meta
    try:
        return GPT(cfg)
    finally:
        torch.nn.Module.register_parameter = old


def param_groups_counts(cfg):
    """Counts per spec group: wte, value_embeds, lm_head, transformer_matrices, scalars."""
    shapes = {k: tuple(p.shape) for k, p in meta_model(cfg).named_parameters()}
    counts = {"wte": 0, "value_embeds": 0, "lm_head": 0, "transformer_matrices": 0, "scalars": 0}
    for k, shp in shapes.items():
        n = math.prod(shp)
        if k == "transformer.wte.weight":
            counts["wte"] += n
        elif k.startswith("value_embeds."):
            counts["value_embeds"] += n
        elif k == "lm_head.weight":
            counts["lm_head"] += n
        elif k.startswith("transformer.h."):
            counts["transformer_matrices"] += n
        else:
            counts["scalars"] += n
    return counts


def flops_per_token(cfg, T=None):
    """6 * (all linear weights incl. lm_head, ve_gate, smear_gate) + sum_l 12 H D min(window, T)."""
    T = T or cfg.sequence_len
    shapes = {k: tuple(p.shape) for k, p in meta_model(cfg).named_parameters()}
    linear = sum(math.prod(s) for k, s in shapes.items()
                 if len(s) == 2 and not k.startswith(("transformer.wte.", "value_embeds.")))
    attn = sum(12 * cfg.n_head * cfg.head_dim * min(w, T) for w in cfg.layer_windows())
    return 6 * linear + attn
