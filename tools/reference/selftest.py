#!/usr/bin/python3
"""Checks of the reference against the spec's numbers; exits non-zero on any failure.

Run: /usr/bin/python3 tools/reference/selftest.py   (about a minute on one core)
`meson test` runs it too (tools/reference_selftest). Exits 77 (skipped) when numpy or
torch is missing (python3-numpy, python3-torch: tools/setup.sh installs them).
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import numpy as np  # noqa: E402
    import torch  # noqa: E402
    from torch.nn.utils.stateless import functional_call  # noqa: E402
except ImportError as e:  # a missing precondition: skipped (77), never passed
    print(f"skipped: {e} (install python3-numpy and python3-torch, e.g. with tools/setup.sh)")
    sys.exit(77)

import model as M  # noqa: E402
import optim as O  # noqa: E402
import safetensors_io  # noqa: E402

FAILURES = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        FAILURES.append(name)


def tiny_config(n_layer=3, windows=(3, 5, 9)):
    """Three layers (so backout is not the last layer, whose backout gradient is exactly 0), C=32, head_dim 16, H=2, KV=1 (grouped-query), V=64, T=9, short windows to exercise masking."""
    return M.Config(n_layer=n_layer, n_embd=32, n_head=2, n_kv_head=1, head_dim=16, vocab_size=64,
                    sequence_len=9, windows=list(windows) if windows else None)


def randomized_model(cfg, seed, dtype=torch.float64):
    """A model with every parameter random and non-zero, so every gradient path is live."""
    torch.manual_seed(seed)
    model = M.GPT(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.5 if p.ndim == 2 else 0.3) + (0.5 if p.ndim < 2 else 0.0))
    return model.to(dtype)


# ----------------------------------------------------------------------------- counts and flops

# Constants from nanochat itself, written out here (not taken from the code under test).
# d8 (depth 8, vocab 32768, sequence_len 1024): nanochat/gpt.py, the total of
# GPT.num_scaling_params() and GPT.estimate_flops().
NANOCHAT_D8_PARAMS = 125_829_354
NANOCHAT_D8_FLOPS_PER_TOKEN = 273_679_632
# nanochat/optim.py, polar_express_coeffs (Polar Express, 5 iterations, safety factor 2e-2, cushion 2).
NANOCHAT_POLAR_EXPRESS_COEFFS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def test_d8_counts():
    cfg = M.Config.for_depth(8)
    counts = M.param_groups_counts(cfg)
    total = sum(counts.values())
    want = {"wte": 16_777_216, "value_embeds": 67_108_864, "lm_head": 16_777_216,
            "transformer_matrices": 25_166_016, "scalars": 42}
    check("d8 parameter groups", counts == want, str(counts))
    check("d8 total parameters (nanochat's)", total == NANOCHAT_D8_PARAMS, str(total))
    ve_gate = sum(p.numel() for n, p in M.meta_model(cfg).named_parameters() if "ve_gate" in n)
    check("d8 ve_gate parameters", ve_gate == 192, str(ve_gate))
    check("d8 windows", cfg.layer_windows() == [256, 256, 256, 1024, 256, 256, 256, 1024], str(cfg.layer_windows()))
    flops = M.flops_per_token(cfg)
    check("d8 flops per token (nanochat's)", flops == NANOCHAT_D8_FLOPS_PER_TOKEN, str(flops))


def test_schedules():
    cfg8, cfg12 = M.Config.for_depth(8), M.Config.for_depth(12)
    check("wd reference size is d12", O.wd_params(cfg12) == O.D_REF_PARAMS, str(O.wd_params(cfg12)))
    check("d8 wd size", O.wd_params(cfg8) == 41_943_232, str(O.wd_params(cfg8)))
    wd_s, b, d = O.muon_wd_scaled(cfg8, 4096), O.batch_scale(4096), O.dim_scale(cfg8.n_embd)
    check("d8 wd_s at 4096", abs(wd_s - 0.064965) < 5e-7, f"{wd_s:.7f}")
    check("lr scale b at 4096", abs(b - 0.0883883) < 5e-8, f"{b:.8f}")
    check("lr scale d at d8", abs(d - 1.2247449) < 5e-8, f"{d:.8f}")
    N = 1000  # W = 650, warmdown starts at 350
    cases = [(O.lr_multiplier(0, N), 1 / 40), (O.lr_multiplier(39, N), 1.0), (O.lr_multiplier(350, N), 1.0),
             (O.lr_multiplier(351, N), 649 / 650 + (1 / 650) * 0.05), (O.lr_multiplier(999, N), 0.05 + 0.95 / 650),
             (O.muon_momentum(0, N), 0.85), (O.muon_momentum(200, N), 0.91),
             (O.muon_momentum(400, N), 0.97 * 600 / 650 + 0.90 * 50 / 650),
             (O.muon_momentum(1999, 2000), 0.97 * (1 / 1300) + 0.90 * (1299 / 1300)),
             (O.muon_momentum(600, 2000), 0.97),
             (O.muon_weight_decay(0, N, 1.0), 1.0), (O.muon_weight_decay(500, N, 1.0), 0.5)]
    bad = [(i, got, want) for i, (got, want) in enumerate(cases) if abs(got - want) > 1e-12]
    check("schedule values", not bad, str(bad))
    check("warmdown rounds half to even", O.warmdown_steps(10) == 6, str(O.warmdown_steps(10)))


# ----------------------------------------------------------------------------- numerics

def test_ops_gradcheck():
    torch.manual_seed(0)
    dt = torch.float64
    x = torch.randn(2, 5, 8, dtype=dt, requires_grad=True)
    ok = torch.autograd.gradcheck(M.rms_norm, (x,))
    q = torch.randn(1, 2, 6, 4, dtype=dt, requires_grad=True)
    k = torch.randn(1, 1, 6, 4, dtype=dt, requires_grad=True)
    v = torch.randn(1, 1, 6, 4, dtype=dt, requires_grad=True)
    allowed = M.window_mask(6, 2)
    ok &= torch.autograd.gradcheck(lambda a, b, c: M.attention(a, b, c, allowed), (q, k, v))
    xs = torch.randn(2, 5, 30, dtype=dt, requires_grad=True)
    w = torch.randn(1, 24, dtype=dt, requires_grad=True)
    lam = torch.tensor([0.7], dtype=dt, requires_grad=True)
    ok &= torch.autograd.gradcheck(M.smear, (xs, w, lam))
    check("float64 gradcheck of rms_norm, attention, smear", bool(ok))


def test_model_gradcheck():
    """Whole tiny model in float64: loss as a function of every parameter at once."""
    cfg = tiny_config()
    model = randomized_model(cfg, 1)
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in model.named_parameters())
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, cfg.vocab_size, (2, 9), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, 9), generator=g)
    tgt[0, 4] = -1

    def loss_of(*ps):
        return functional_call(model, dict(zip(names, ps)), (idx, tgt))[0]

    t0 = time.time()
    ok = torch.autograd.gradcheck(loss_of, params, fast_mode=True, atol=1e-6, rtol=1e-5)
    check("float64 gradcheck of the whole tiny model (fast mode, all parameters)", bool(ok),
          f"{len(params)} tensors, {sum(p.numel() for p in params)} values, {time.time() - t0:.1f}s")
    small = [i for i, n in enumerate(names) if params[i].numel() <= 64]

    def loss_of_small(*ps):
        full = list(params)
        for i, p in zip(small, ps):
            full[i] = p
        return loss_of(*full)
    ok = torch.autograd.gradcheck(loss_of_small, tuple(params[i] for i in small), atol=1e-6, rtol=1e-5)
    check("float64 gradcheck, every element of the scalars and gates", bool(ok), str([names[i] for i in small]))


def naive_attention_layer(q, k, v, window):
    """Per-query loop: softmax over keys t-window..t. q: (H, T, D), k/v: (KV, T, D)."""
    H, T, D = q.shape
    rep = H // k.shape[0]
    out = torch.zeros_like(q)
    for h in range(H):
        for t in range(T):
            lo = max(0, t - window)
            s = torch.stack([q[h, t] @ k[h // rep, j] for j in range(lo, t + 1)]) / math.sqrt(D)
            out[h, t] = torch.softmax(s, 0) @ v[h // rep, lo:t + 1]
    return out


def test_attention_and_rotary_semantics():
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 4, 7, 8, dtype=torch.float64), torch.randn(1, 2, 7, 8, dtype=torch.float64), \
        torch.randn(1, 2, 7, 8, dtype=torch.float64)
    err = 0.0
    for w in (0, 2, 7):
        got = M.attention(q, k, v, M.window_mask(7, w))[0]
        err = max(err, (got - naive_attention_layer(q[0], k[0], v[0], w)).abs().max().item())
    check("windowed GQA attention matches a per-query loop", err < 1e-12, f"max err {err:.2e}")
    # rotary: pair (x1_j, x2_j) rotated by -angle as a complex number (x1 + i x2) * e^{-i angle}
    x = torch.randn(1, 5, 2, 8, dtype=torch.float64)
    cos, sin = M.rotary_tables(5, 8, torch.float64)
    got = M.apply_rotary(x, cos, sin)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.exp(-1j * torch.atan2(sin, cos))[None, :, None, :]
    err = (got - torch.cat([z.real, z.imag], -1)).abs().max().item()
    inv = 100000.0 ** (-2 * 3 / 8)
    check("rotary is a rotation with inv_freq 100000^(-2j/D)", err < 1e-12 and abs(sin[1, 3].item() - math.sin(inv)) < 1e-7,
          f"max err {err:.2e}")


def test_causality():
    """Changing token t must leave the losses of earlier positions unchanged."""
    cfg = tiny_config()
    model = randomized_model(cfg, 4)
    idx = torch.randint(0, cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(5))
    tgt = torch.roll(idx, -1, 1)
    with torch.no_grad():
        _, a = model(idx, tgt)
        idx2 = idx.clone()
        idx2[0, 6] = (idx2[0, 6] + 1) % cfg.vocab_size
        _, b = model(idx2, tgt)
    check("causal: earlier positions unaffected by a later token", torch.equal(a[:6], b[:6]) and not torch.equal(a[6:], b[6:]))


def test_d8_init_loss():
    cfg = M.Config.for_depth(8, sequence_len=64)
    model = M.GPT(cfg)
    M.init_weights(model, 0)
    idx = torch.randint(0, cfg.vocab_size, (1, 64), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        loss, _ = model(idx, torch.roll(idx, -1, 1))
    want = math.log(32768)
    check("d8 init loss near ln(32768)", abs(loss.item() - want) < 0.01, f"{loss.item():.5f} vs {want:.5f}")
    sd = {n: p for n, p in model.named_parameters()}
    s = math.sqrt(3) / math.sqrt(512)
    check("d8 init statistics", abs(sd["transformer.wte.weight"].std().item() - 0.8) < 0.01
          and abs(sd["transformer.h.0.attn.c_q.weight"].abs().max().item() - s) < 1e-3
          and sd["transformer.h.0.mlp.c_proj.weight"].abs().max().item() == 0.0
          and abs(sd["resid_lambdas"][7].item() - 1.05) < 1e-6 and abs(sd["backout_lambda"].item() - 0.2) < 1e-7)


def test_optimizer_properties():
    """Muon's polar step uses nanochat's coefficients and lands near an orthogonal matrix;
    AdamW's first step is lr*sign(g)."""
    check("polar express coefficients are nanochat's", O.POLAR_EXPRESS == NANOCHAT_POLAR_EXPRESS_COEFFS,
          str(O.POLAR_EXPRESS))
    torch.manual_seed(7)
    X = torch.randn(48, 16)
    Y = O.polar_express(X / (X.norm() * 1.01 + 1e-6))
    sv = torch.linalg.svdvals(Y)
    check("polar express singular values in (0.6, 1.3)", sv.min().item() > 0.6 and sv.max().item() < 1.3,
          f"{sv.min().item():.3f}..{sv.max().item():.3f}")
    p, g = torch.randn(10), torch.randn(10)
    p0, state = p.clone(), {}
    O.adamw_update(p, g, state, lr=0.1, betas=(0.8, 0.95), wd=0.0)
    check("adamw first step is -lr*sign(g)", torch.allclose(p - p0, -0.1 * g.sign(), atol=1e-6))


# ----------------------------------------------------------------------------- command line

def run_cli(*args):
    r = subprocess.run([sys.executable, os.path.join(HERE, "nanochat_ref.py"), *args],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr.strip()


def test_cli_roundtrip():
    with tempfile.TemporaryDirectory() as tmp:
        cfgp = os.path.join(tmp, "c.json")
        with open(cfgp, "w") as f:
            f.write('{"n_layer": 3, "n_embd": 32, "n_head": 2, "n_kv_head": 1, "head_dim": 16, '
                    '"vocab_size": 64, "sequence_len": 9, "window_pattern": "SL", "windows": [3, 5, 9]}')
        w, b = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "b.safetensors")
        rc, err = run_cli("init", "--config", cfgp, "--seed", "3", "--out", w)
        check("cli init", rc == 0, err)
        # perturb the zero-initialised projections so every gradient is non-zero
        ws = safetensors_io.load(w)
        rng = np.random.default_rng(0)
        ws = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in ws.items()}
        safetensors_io.save(w, ws)
        idx = rng.integers(0, 64, (2, 9)).astype(np.int64)
        tgt = rng.integers(0, 64, (2, 9)).astype(np.int64)
        tgt[1, 2] = -1
        safetensors_io.save(b, {"idx": idx, "tgt": tgt})
        outs = {}
        for dt in ("float32", "float64"):
            o = os.path.join(tmp, f"o_{dt}.safetensors")
            rc, err = run_cli("fwdbwd", "--config", cfgp, "--weights", w, "--batch", b, "--out", o, "--dtype", dt)
            check(f"cli fwdbwd {dt}", rc == 0, err)
            outs[dt] = safetensors_io.load(o) if rc == 0 else {}
        if outs["float32"] and outs["float64"]:
            a, c = outs["float32"], outs["float64"]
            worst = max(float(np.linalg.norm(a[k] - c[k]) / (np.linalg.norm(c[k]) + 1e-6)) for k in c)
            check("fwdbwd f32 agrees with f64", worst < 1e-4 and a["losses"][1 * 9 + 2] == 0.0
                  and set(c) == {"loss", "losses"} | {"grad." + k for k in ws}, f"worst rel {worst:.2e}")
        rc, err = run_cli("fwdbwd", "--config", cfgp, "--weights", b, "--batch", b, "--out", os.path.join(tmp, "x"))
        check("cli fwdbwd rejects wrong weights with exit 2", rc == 2 and "\n" not in err, err)
        grads = {f"step{i}.{k}": (0.01 * rng.standard_normal(v.shape)).astype(np.float32)
                 for i in range(2) for k, v in ws.items()}
        gp, op = os.path.join(tmp, "g.safetensors"), os.path.join(tmp, "p.safetensors")
        safetensors_io.save(gp, grads)
        rc, err = run_cli("optim", "--config", cfgp, "--weights", w, "--grads", gp, "--num-iterations", "1000",
                          "--total-batch", "4096", "--start-step", "39", "--out", op)
        ok = rc == 0
        if ok:
            o = safetensors_io.load(op)
            ok = abs(o["step0.lr_mult"][0] - 1.0) < 1e-7 and abs(o["step1.lr_mult"][0] - 1.0) < 1e-7 \
                and abs(o["step0.muon_momentum"][0] - (0.85 + 0.12 * 39 / 400)) < 1e-6 \
                and not np.array_equal(o["step1.transformer.h.0.mlp.c_fc.weight"], ws["transformer.h.0.mlp.c_fc.weight"])
        check("cli optim", ok, err)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_matches_accumulation():
    """2 ranks x 1 micro-batch (Gloo all-reduce) must train like 1 rank x 2 micro-batches on the same rows."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        np.random.default_rng(8).integers(0, 128, 4000).astype("<u2").tofile(data)
        common = ["--depth", "2", "--device-batch", "2", "--seq-len", "16", "--vocab", "128", "--steps", "3",
                  "--threads", "1", "--data", data, "--total-batch", "64", "--timeout", "60"]
        script = os.path.join(HERE, "nanochat_ref.py")

        def launch(rank, world, port):
            return subprocess.Popen([sys.executable, script, "train-ddp", "--rank", str(rank), "--world-size",
                                     str(world), "--master-port", str(port), *common],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        port = free_port()
        procs = [launch(r, 2, port) for r in (0, 1)]
        outs = [p.communicate(timeout=120) for p in procs]
        single = launch(0, 1, free_port()).communicate(timeout=120)
        ok = all(p.returncode == 0 for p in procs)
        try:
            two = [json.loads(line)["loss"] for line in outs[0][0].splitlines()]
            one = [json.loads(line)["loss"] for line in single[0].splitlines()]
            ok = ok and len(two) == len(one) == 3 and max(abs(a - b) for a, b in zip(two, one)) < 1e-5 \
                and abs(two[2] - two[0]) > 1e-4
        except (ValueError, KeyError):
            ok, two, one = False, outs[0][1][-300:], single[1][-300:]
        check("train-ddp on 2 ranks equals 1 rank with 2 accumulation steps", ok, f"{two} vs {one}")


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    for test in (test_d8_counts, test_schedules, test_ops_gradcheck, test_attention_and_rotary_semantics,
                 test_causality, test_model_gradcheck, test_optimizer_properties, test_cli_roundtrip,
                 test_ddp_matches_accumulation, test_d8_init_loss):
        try:
            test()
        except Exception as e:  # a crash is a failure of that check, not of the whole run
            check(test.__name__, False, f"raised {type(e).__name__}: {e}")
    print(f"{len(FAILURES)} failed, {time.time() - t0:.1f}s")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
