"""The Python side of `ringtrain import` and `ringtrain export --format nanochat` (embedded in
the binary, run with python3): nanochat's .pt and .pkl files are read and written by the real
PyTorch and, where installed, the real tiktoken; the C++ side checks everything against the
model config.

    python3 - pt2st MODEL.pt OUT.safetensors      a nanochat state_dict as safetensors
    python3 - pkl2tt TOKENIZER.pkl OUT.tiktoken PATTERN_FILE
                                                   nanochat's pickled tiktoken Encoding as a .tiktoken file
    python3 - st2nc PLAN.json                      a checkpoint in nanochat's layout (see export_nanochat)

Reading never runs code from the file: torch.load(weights_only=True) takes tensors only, and
the tokenizer's unpickler resolves one name, tiktoken.core.Encoding, to a plain record of its
state (tiktoken need not be installed). Exit 2 with one line on stderr for a file that is not
what nanochat writes."""
import base64
import io
import json
import os
import pickle
import struct
import sys


def fail(message, code=2):
    print("ringtrain-helper: " + message, file=sys.stderr)
    sys.exit(code)


def fail_no_torch(message):
    """Exit 3: this interpreter lacks PyTorch; the caller may try another one (python_helper.cpp)."""
    fail(message, 3)


def pt2st(src, dst):
    try:
        import torch
    except ImportError:
        fail_no_torch("reading a .pt file needs PyTorch")
    try:
        sd = torch.load(src, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure of the loader is the file's
        first = (str(e).strip().splitlines() or [""])[0][:160]
        fail(f"{src}: not a PyTorch file of tensors ({type(e).__name__}: {first}); give nanochat's model_NNNNNN.pt")
    if not isinstance(sd, dict) or not sd:
        fail(f"{src}: holds {type(sd).__name__}, not a state_dict of tensors; give nanochat's model_NNNNNN.pt")
    header, blobs, offset = {}, [], 0
    for key, value in sd.items():
        if not isinstance(key, str) or not torch.is_tensor(value):
            fail(f"{src}: entry {str(key)[:80]!r} is not a named tensor; give nanochat's model_NNNNNN.pt")
        # torch.compile's wrapper prefixes every key; nanochat saves the unwrapped model, but
        # files from other scripts carry it.
        name = key[len("_orig_mod."):] if key.startswith("_orig_mod.") else key
        t = value.detach().contiguous()
        if t.dtype == torch.bfloat16:
            dtype, raw = "BF16", t.view(torch.int16).numpy().tobytes()
        elif t.dtype == torch.float32:
            dtype, raw = "F32", t.numpy().tobytes()
        else:
            fail(f"{src}: tensor {name} is {t.dtype}; nanochat's weights are float32 or bfloat16")
        if name in header:
            fail(f"{src}: tensor {name} appears twice (with and without _orig_mod.); give one model's state_dict")
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (len(text) + 8) % 8) % 8)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, dst)


# ---- the tokenizer: nanochat's tokenizer.pkl is pickle.dump(tiktoken.Encoding) ----

class _EncodingState:
    """What unpickling tiktoken.core.Encoding yields here: its __getstate__ dict, nothing run."""

    def __setstate__(self, state):
        self.state = state


class _OnlyEncoding(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("tiktoken.core", "Encoding"):
            return _EncodingState
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, and a tokenizer.pkl holds only tiktoken.core.Encoding")


def pkl2tt(src, dst, pattern_file):
    pattern = open(pattern_file, encoding="utf-8").read()
    try:
        with open(src, "rb") as f:
            raw = f.read(64 << 20)
            if f.read(1):
                fail(f"{src}: larger than 64 MiB; a tokenizer.pkl of nanochat is a few MB")
        enc = _OnlyEncoding(io.BytesIO(raw)).load()
    except OSError as e:
        fail(f"{src}: cannot be read ({e.strerror}); give nanochat's tokenizer/tokenizer.pkl")
    except Exception as e:  # noqa: BLE001 - any failure of the unpickler is the file's
        fail(f"{src}: not a pickled tiktoken Encoding ({type(e).__name__}: {str(e)[:160]}); give nanochat's tokenizer/tokenizer.pkl")
    if not isinstance(enc, _EncodingState):
        fail(f"{src}: holds {type(enc).__name__}, not a tiktoken Encoding; give nanochat's tokenizer/tokenizer.pkl")
    state = getattr(enc, "state", None)
    if isinstance(state, str):
        fail(f"{src}: names tiktoken's built-in encoding {state[:40]!r} instead of holding its merges; "
             "ringtrain takes nanochat's own tokenizer (tok_train.py's tokenizer.pkl)")
    if not isinstance(state, dict) or not {"pat_str", "mergeable_ranks", "special_tokens"} <= set(state):
        fail(f"{src}: the Encoding lacks pat_str, mergeable_ranks or special_tokens; give nanochat's tokenizer.pkl")
    if state["pat_str"] != pattern:
        fail(f"{src}: splits text with another pattern than nanochat's ({str(state['pat_str'])[:60]!r}...); "
             "ringtrain's tokenizer has nanochat's split pattern only")
    ranks, specials = state["mergeable_ranks"], state["special_tokens"]
    if not isinstance(ranks, dict) or not isinstance(specials, dict):
        fail(f"{src}: mergeable_ranks or special_tokens is not a dict; give nanochat's tokenizer.pkl")
    n = len(ranks)
    by_rank = [None] * n
    for token, rank in ranks.items():
        if not isinstance(token, bytes) or not isinstance(rank, int) or not 0 <= rank < n or by_rank[rank] is not None:
            fail(f"{src}: mergeable_ranks is not a numbering 0..{n - 1} of byte strings; the file is damaged")
        by_rank[rank] = token
    want = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
    if specials != {name: n + i for i, name in enumerate(want)}:
        fail(f"{src}: its special tokens are not nanochat's 9 (<|bos|> ... <|output_end|>) at ids {n}..{n + 8}; "
             "ringtrain's tokenizer has exactly those")
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        for rank, token in enumerate(by_rank):
            f.write(base64.b64encode(token).decode("ascii") + " " + str(rank) + "\n")
    os.replace(tmp, dst)


def encoding_pickle(pattern, ranks, specials):
    """pickle.dumps of tiktoken.Encoding(name="rustbpe", ...), as nanochat's tok_train writes it.
    With tiktoken installed, the real object is built (which also checks it) and pickled; without
    it, a stand-in of the same class name and state gives the same pickle."""
    try:
        import tiktoken
    except ImportError:
        tiktoken = None
    if tiktoken is not None:
        enc = tiktoken.Encoding(name="rustbpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
        return pickle.dumps(enc)
    import copyreg
    import types

    class Encoding:  # pickled as tiktoken.core.Encoding: NEWOBJ of the class, then BUILD with the state
        def __init__(self, state):
            self.state = state

        def __reduce_ex__(self, protocol):
            return (copyreg.__newobj__, (Encoding,), self.state)

    Encoding.__module__, Encoding.__qualname__ = "tiktoken.core", "Encoding"
    package, core = types.ModuleType("tiktoken"), types.ModuleType("tiktoken.core")
    core.Encoding, package.core = Encoding, core
    sys.modules["tiktoken"], sys.modules["tiktoken.core"] = package, core
    try:
        return pickle.dumps(Encoding({"name": "rustbpe", "pat_str": pattern, "mergeable_ranks": ranks, "special_tokens": specials}))
    finally:
        del sys.modules["tiktoken"], sys.modules["tiktoken.core"]


# ---- export: a ringtrain checkpoint in nanochat's layout ----

def read_safetensors(path, torch):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(blob[begin:end])
        if info["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32) if raw else torch.zeros(0)
        elif info["dtype"] == "BF16":
            t = (torch.frombuffer(raw, dtype=torch.int16) if raw else torch.zeros(0, dtype=torch.int16)).view(torch.bfloat16)
        else:
            fail(f"{path}: tensor {name} is {info['dtype']}; expected F32 or BF16")
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def st2nc(plan_path):
    try:
        import torch
    except ImportError:
        fail_no_torch("writing nanochat's .pt files needs PyTorch")
    plan = json.load(open(plan_path, encoding="utf-8"))
    out, model_dir, step = plan["out"], plan["model_dir"], plan["step"]
    weights, _ = read_safetensors(plan["weights"], torch)
    padding, dtypes = {}, {}
    if plan.get("nanochat_extras"):
        padding, meta = read_safetensors(plan["nanochat_extras"], torch)
        dtypes = dict(json.loads(meta.get("dtypes", "[]")))  # [[name, dtype], ...] in nanochat's order
    vocab, padded = plan["vocab_size"], plan["padded_vocab_size"]
    tables = {name for name in weights if name in ("transformer.wte.weight", "lm_head.weight") or name.startswith("value_embeds.")}
    sd, kept_f32 = {}, []
    for name in (list(dtypes) if set(dtypes) == set(weights) else list(weights)):
        x = weights[name]
        # bf16 where nanochat's file had it and the values are still bf16's (an import not
        # trained since); trained values stay float32 rather than lose bits.
        if dtypes.get(name) == "BF16":
            b = x.to(torch.bfloat16)
            if torch.equal(b.float(), x):
                x = b
            else:
                kept_f32.append(name)
        if name in tables and padded > vocab:
            rows = padding.get(name)
            if rows is None or list(rows.shape) != [padded - vocab, x.shape[1]]:
                rows = torch.zeros(padded - vocab, x.shape[1])  # never looked up: nanochat crops the logits
            x = torch.cat([x, rows.to(x.dtype)])
        sd[name] = x.contiguous()
    tok = plan["tokenizer"]
    ranks = {}
    with open(tok["tiktoken"], encoding="ascii") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    specials = {name: len(ranks) + i for i, name in enumerate(tok["special_tokens"])}
    pkl = encoding_pickle(tok["pattern"], ranks, specials)
    # Files are staged beside their place and renamed in at the end: nothing half-written.
    ckpt_dir, tok_dir = os.path.join(out, model_dir), os.path.join(out, "tokenizer")
    os.makedirs(ckpt_dir, exist_ok=True)
    os.makedirs(tok_dir, exist_ok=True)
    old_pkl = os.path.join(tok_dir, "tokenizer.pkl")
    if os.path.exists(old_pkl) and open(old_pkl, "rb").read() != pkl:
        fail(f"{old_pkl} exists and is another tokenizer (the checkpoints beside it need it); give another --out")
    staged = []

    def stage(final, write):
        tmp = final + f".ringtrain-{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        staged.append((tmp, final))

    name = f"{step:06d}"
    try:
        stage(os.path.join(ckpt_dir, f"model_{name}.pt"), lambda f: torch.save(sd, f))
        stage(os.path.join(ckpt_dir, f"meta_{name}.json"), lambda f: f.write(json.dumps(plan["meta"], indent=2).encode()))
        stage(old_pkl, lambda f: f.write(pkl))
        stage(os.path.join(tok_dir, "token_bytes.pt"),
              lambda f: torch.save(torch.tensor(plan["token_bytes"], dtype=torch.int32), f))
    except OSError as e:
        for tmp, _ in staged:
            os.remove(tmp)
        fail(f"cannot write in {out} ({e.strerror}); check free disk space and permissions")
    for tmp, final in staged:
        os.replace(tmp, final)
    for _, final in staged:
        print(final)
    if kept_f32:
        print("kept float32 (trained since the import, no longer bf16 values): " + ", ".join(kept_f32[:4]) +
              (" ..." if len(kept_f32) > 4 else ""))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "pt2st":
        pt2st(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "pkl2tt":
        pkl2tt(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "st2nc":
        st2nc(sys.argv[2])
    else:
        fail("usage: nanochat_helper pt2st MODEL.pt OUT.safetensors | pkl2tt TOKENIZER.pkl OUT.tiktoken PATTERN_FILE | st2nc PLAN.json")


if __name__ == "__main__":
    main()
