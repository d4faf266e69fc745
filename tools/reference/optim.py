"""nanochat's MuonAdamW and its three schedules, from the nanochat model specification.

All math is float32 (nanochat runs the polar iteration in bf16 on GPUs; here it is f32).
Every matrix is processed on its own (nanochat stacks same-shape matrices, which
computes the same thing because every norm is per matrix).
"""
import math

import torch

from model import Config, meta_model

REFERENCE_BATCH_TOKENS = 524288
REFERENCE_DIM = 768
# transformer matrices + lm_head of d12 at V = 32768 (the weight-decay reference size at
# nanochat's vocabulary; base_train builds its d12 reference at the run's vocabulary)
D_REF_PARAMS = 110_100_912
MUON_WD_BASE = 0.28
WARMUP_STEPS = 40
WARMDOWN_RATIO = 0.65
FINAL_LR_FRAC = 0.05
MUON_MOMENTUM_WARMUP = 400

POLAR_EXPRESS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


# ----------------------------------------------------------------------------- scales and schedules

def batch_scale(total_batch_tokens):
    """b = sqrt(total_batch / 524288)."""
    return math.sqrt(total_batch_tokens / REFERENCE_BATCH_TOKENS)


def dim_scale(n_embd):
    """d = (C / 768)^-0.5, only for lm_head, wte, value_embeds."""
    return (n_embd / REFERENCE_DIM) ** -0.5


def wd_params(cfg):
    """transformer matrices (ve_gate included) + lm_head parameter count."""
    n = 0
    for name, p in meta_model(cfg).named_parameters():
        if name.startswith("transformer.h.") or name == "lm_head.weight":
            n += p.numel()
    return n


def reference_config(cfg, head_dim=128, aspect_ratio=64):
    """base_train's d12 reference model: the run's vocabulary, width rounded up to whole heads."""
    n_embd = -(-12 * aspect_ratio // head_dim) * head_dim
    n_head = n_embd // head_dim
    return Config(12, n_embd, n_head, n_head, head_dim, cfg.vocab_size, cfg.sequence_len)


def muon_wd_scaled(cfg, total_batch_tokens, ref_head_dim=128):
    """wd_s = 0.28 * b * D_ref / D_model, D_ref of d12 at the run's vocabulary."""
    d_ref = wd_params(reference_config(cfg, ref_head_dim))
    return MUON_WD_BASE * batch_scale(total_batch_tokens) * d_ref / wd_params(cfg)


def warmdown_steps(num_iterations):
    """W = round(0.65 N) with Python's round (half to even), as nanochat computes it."""
    return round(WARMDOWN_RATIO * num_iterations)


def lr_multiplier(it, num_iterations):
    W = warmdown_steps(num_iterations)
    if it < WARMUP_STEPS:
        return (it + 1) / WARMUP_STEPS
    if it <= num_iterations - W:
        return 1.0
    p = (num_iterations - it) / W
    return p + (1 - p) * FINAL_LR_FRAC


def muon_momentum(it, num_iterations):
    W = warmdown_steps(num_iterations)
    start = num_iterations - W
    if it < MUON_MOMENTUM_WARMUP:
        frac = it / MUON_MOMENTUM_WARMUP
        return (1 - frac) * 0.85 + frac * 0.97
    if it >= start:
        p = (it - start) / W
        return 0.97 * (1 - p) + 0.90 * p
    return 0.97


def muon_weight_decay(it, num_iterations, wd_s):
    return wd_s * 0.5 * (1 + math.cos(math.pi * it / num_iterations))


# ----------------------------------------------------------------------------- groups

def adamw_group_of(name):
    """(group name) for non-Muon parameters; None means the parameter goes to Muon."""
    if name.startswith("transformer.h."):
        return None
    if name == "lm_head.weight":
        return "lm_head"
    if name == "transformer.wte.weight":
        return "wte"
    if name.startswith("value_embeds."):
        return "value_embeds"
    if name in ("resid_lambdas", "x0_lambdas"):
        return name
    if name in ("smear_gate.weight", "smear_lambda", "backout_lambda"):
        return "gates"
    raise ValueError(f"no optimizer group for parameter {name}")


def adamw_hyper(group, b, d):
    """(lr, (beta1, beta2), weight_decay) per the spec table."""
    return {
        "lm_head": (0.008 * b * d, (0.8, 0.96), 0.01),
        "wte": (0.3 * b * d, (0.8, 0.995), 0.001),
        "value_embeds": (0.15 * b * d, (0.8, 0.995), 0.01),
        "resid_lambdas": (0.005 * b, (0.8, 0.95), 0.05),
        "x0_lambdas": (0.5 * b, (0.96, 0.95), 0.0),
        "gates": (0.2, (0.8, 0.95), 0.0),
    }[group]


# ----------------------------------------------------------------------------- update rules

@torch.no_grad()
def adamw_update(p, g, state, lr, betas, wd, eps=1e-10):
    """Decoupled weight decay, then Adam with bias correction."""
    if not state:
        state["step"] = 0
        state["m"] = torch.zeros_like(p)
        state["v"] = torch.zeros_like(p)
    state["step"] += 1
    beta1, beta2 = betas
    p.mul_(1 - lr * wd)
    state["m"].lerp_(g, 1 - beta1)
    state["v"].lerp_(g.square(), 1 - beta2)
    bias1 = 1 - beta1 ** state["step"]
    bias2 = 1 - beta2 ** state["step"]
    denom = (state["v"] / bias2).sqrt().add_(eps)
    p.add_(state["m"] / denom, alpha=-lr / bias1)


def polar_express(X):
    """Five Polar Express iterations towards the orthogonal polar factor of X."""
    tall = X.shape[0] > X.shape[1]
    for a, b, c in POLAR_EXPRESS:
        if tall:
            A = X.T @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.T
            X = a * X + (b * A + c * (A @ A)) @ X
    return X


@torch.no_grad()
def muon_update(p, g, state, lr, momentum, wd, beta2=0.9):
    """One Muon step of one matrix p (m x n), spec steps 1-7."""
    m, n = p.shape
    if not state:
        state["buf"] = torch.zeros_like(p)
        state["sbuf"] = torch.zeros((m, 1) if m >= n else (1, n), dtype=p.dtype)
    # 1. Nesterov momentum
    buf = state["buf"]
    buf.lerp_(g, 1 - momentum)
    g = g.lerp(buf, momentum)
    # 2. row equilibration: every row gets the mean row norm
    target = g.norm() / math.sqrt(m)
    X = g * (target / g.norm(dim=1, keepdim=True).clamp_min(1e-6))
    # 3-4. normalise, then orthogonalise
    X = X / (X.norm() * 1.01 + 1e-6)
    g = polar_express(X)
    # 5. snap the Frobenius norm to that of a semi-orthogonal matrix
    g = g * (math.sqrt(min(m, n)) / g.norm().clamp_min(1e-6))
    # 6. variance reduction, factored per row (m >= n) or per column
    red_dim = 1 if m >= n else 0
    v = g.square().mean(dim=red_dim, keepdim=True)
    size = g.shape[red_dim]
    v_norm = (v.sum() * size).sqrt()
    state["sbuf"].lerp_(v, 1 - beta2)
    s = state["sbuf"].clamp_min(1e-10).rsqrt()
    v_norm_new = (v * size * s.square()).sum().sqrt()
    g = g * (s * (v_norm / v_norm_new.clamp_min(1e-10)))
    # 7. cautious weight decay: only where the update and the weight agree in sign
    mask = (g * p) >= 0
    p.sub_(lr * g + lr * wd * p * mask)


class MuonAdamW:
    """The combined optimizer over a model's named parameters (fresh state at construction)."""

    def __init__(self, named_params, cfg: Config, total_batch_tokens, ref_head_dim=128):
        self.b = batch_scale(total_batch_tokens)
        self.d = dim_scale(cfg.n_embd)
        self.wd_s = muon_wd_scaled(cfg, total_batch_tokens, ref_head_dim)
        self.params = dict(named_params)
        self.state = {name: {} for name in self.params}
        self.muon_base_lr = 0.02 * self.b

    def muon_lr(self, p):
        rows, cols = p.shape
        return self.muon_base_lr * math.sqrt(max(1.0, rows / cols))

    @torch.no_grad()
    def step(self, lr_mult, momentum, muon_wd, grads=None):
        """Apply one step; grads defaults to each parameter's .grad."""
        for name, p in self.params.items():
            g = grads[name] if grads is not None else p.grad
            if g is None:
                continue
            group = adamw_group_of(name)
            if group is None:
                muon_update(p, g, self.state[name], self.muon_lr(p) * lr_mult, momentum, muon_wd)
            else:
                lr, betas, wd = adamw_hyper(group, self.b, self.d)
                adamw_update(p, g, self.state[name], lr * lr_mult, betas, wd)

    def scheduled_step(self, it, num_iterations, grads=None):
        """Step `it` of a run of num_iterations; returns the scalars used."""
        lrm = lr_multiplier(it, num_iterations)
        mom = muon_momentum(it, num_iterations)
        wd = muon_weight_decay(it, num_iterations, self.wd_s)
        self.step(lrm, mom, wd, grads)
        return lrm, mom, wd
