"""Test helper for model_files/nanochat_round_trip: plays nanochat's side with the real
PyTorch (and the real tiktoken where installed).

  make  ROOT WEIGHTS.safetensors CONFIG.json TOKENIZER.tiktoken PATTERN.txt NC_DIR
        a nanochat base directory as base_train and tok_train leave it: base_checkpoints/d2/
        model_000005.pt (bf16 embeddings, padded tables), meta_000005.json, tokenizer/tokenizer.pkl
  compare NC_DIR NC_DIR2     every tensor bit for bit (dtype too), the meta, the tokenizer
  loss  ROOT NC_DIR BATCH.safetensors     the reference model's loss of nanochat's own file
  ids   NC_DIR DATA_DIR N      tokenizer.pkl (by tiktoken where installed) gives the ids of the
                               first N documents of DATA_DIR/train.bin, which ringtrain wrote
Prints what it did; exits 1 with a message on a difference."""
import base64
import copyreg
import json
import os
import pickle
import sys
import types

import torch

SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
TABLES = ("transformer.wte.weight", "lm_head.weight")


def is_table(k):
    return k in TABLES or k.startswith("value_embeds.")


def real_tiktoken():
    try:
        import tiktoken
        return tiktoken
    except ImportError:
        if os.environ.get("RINGTRAIN_REQUIRE_TIKTOKEN") == "1":
            sys.exit("tiktoken is not importable but RINGTRAIN_REQUIRE_TIKTOKEN=1: install python3-tiktoken")
        return None


def encoding_pickle(pattern, ranks, specials):
    tiktoken = real_tiktoken()
    if tiktoken is not None:
        return pickle.dumps(tiktoken.Encoding(name="rustbpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)), "tiktoken"

    # Without tiktoken (Debian 12): the bytes tiktoken's pickle.dump gives, NEWOBJ of
    # tiktoken.core.Encoding then BUILD with its __getstate__ dict.
    class Encoding:
        def __reduce_ex__(self, protocol):
            return (copyreg.__newobj__, (Encoding,), {"name": "rustbpe", "pat_str": pattern, "mergeable_ranks": ranks,
                                                       "special_tokens": specials})
    Encoding.__module__, Encoding.__qualname__ = "tiktoken.core", "Encoding"
    pkg, core = types.ModuleType("tiktoken"), types.ModuleType("tiktoken.core")
    core.Encoding, pkg.core = Encoding, core
    sys.modules["tiktoken"], sys.modules["tiktoken.core"] = pkg, core
    try:
        return pickle.dumps(Encoding()), "stand-in"
    finally:
        del sys.modules["tiktoken"], sys.modules["tiktoken.core"]


def make(root, weights, config, tok_file, pattern_file, out):
    sys.path.insert(0, os.path.join(root, "tools", "reference"))
    import safetensors_io
    cfg = json.load(open(config))
    g = torch.Generator().manual_seed(5)
    sd = {}
    for k, v in safetensors_io.load(weights).items():
        x = torch.from_numpy(v.copy())
        if is_table(k):
            pad = -(-cfg["vocab_size"] // 64) * 64 - x.shape[0]
            x = torch.cat([x, torch.randn(pad, x.shape[1], generator=g)])  # nanochat's padding rows, never read
            if k != "lm_head.weight":
                x = x.to(torch.bfloat16)  # nanochat on a GPU keeps wte and value_embeds in bf16
        sd[k] = x
    ckpt = os.path.join(out, "base_checkpoints", "d2")
    os.makedirs(ckpt)
    torch.save(sd, os.path.join(ckpt, "model_000005.pt"))
    meta = {"step": 5, "val_bpb": 3.25, "model_config": {k: cfg[k] for k in ("sequence_len", "vocab_size", "n_layer", "n_head",
                                                                             "n_kv_head", "n_embd", "window_pattern")},
            "user_config": {"depth": cfg["n_layer"], "max_seq_len": cfg["sequence_len"], "device_batch_size": 2},
            "device_batch_size": 2, "max_seq_len": cfg["sequence_len"], "total_batch_size": 128,
            "dataloader_state_dict": {"pq_idx": 0, "rg_idx": 3}, "loop_state": {"min_val_bpb": 3.25}}
    json.dump(meta, open(os.path.join(ckpt, "meta_000005.json"), "w"), indent=2)
    ranks = {}
    for line in open(tok_file):
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    specials = {name: len(ranks) + i for i, name in enumerate(SPECIALS)}
    data, how = encoding_pickle(open(pattern_file).read(), ranks, specials)
    os.makedirs(os.path.join(out, "tokenizer"))
    open(os.path.join(out, "tokenizer", "tokenizer.pkl"), "wb").write(data)
    print(f"made {out} (tokenizer.pkl by {how})")


class _State:
    def __setstate__(self, state):
        self.state = state


class _Reader(pickle.Unpickler):
    def find_class(self, module, name):
        assert (module, name) == ("tiktoken.core", "Encoding"), (module, name)
        return _State


def tokenizer_of(nc):
    """(ranks, specials) of NC/tokenizer/tokenizer.pkl; with tiktoken, its own object's."""
    raw = open(os.path.join(nc, "tokenizer", "tokenizer.pkl"), "rb").read()
    tiktoken = real_tiktoken()
    if tiktoken is not None:
        enc = pickle.loads(raw)
        assert isinstance(enc, tiktoken.Encoding), type(enc)
        return enc._mergeable_ranks, enc._special_tokens, enc
    s = _Reader(__import__("io").BytesIO(raw)).load().state
    return s["mergeable_ranks"], s["special_tokens"], None


def compare(nc, nc2):
    a = torch.load(os.path.join(nc, "base_checkpoints", "d2", "model_000005.pt"), weights_only=True)
    b = torch.load(os.path.join(nc2, "base_checkpoints", "d2", "model_000005.pt"), weights_only=True)
    if list(a) != list(b):
        sys.exit(f"keys differ: {sorted(set(a) ^ set(b))[:4]} (or their order)")
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k]):
            sys.exit(f"{k} differs: {a[k].dtype} {tuple(a[k].shape)} against {b[k].dtype} {tuple(b[k].shape)}")
    ma = json.load(open(os.path.join(nc, "base_checkpoints", "d2", "meta_000005.json")))
    mb = json.load(open(os.path.join(nc2, "base_checkpoints", "d2", "meta_000005.json")))
    for key in ("step", "val_bpb", "model_config", "user_config", "device_batch_size", "max_seq_len", "total_batch_size"):
        if ma.get(key) != mb.get(key):
            sys.exit(f"meta {key} differs: {ma.get(key)} against {mb.get(key)}")
    if "head_dim" in mb["model_config"]:
        sys.exit("meta model_config has head_dim, which nanochat's GPTConfig does not take")
    ra, sa, enc_a = tokenizer_of(nc)
    rb, sb, enc_b = tokenizer_of(nc2)
    if ra != rb or sa != sb:
        sys.exit("the tokenizers differ")
    tb = torch.load(os.path.join(nc2, "tokenizer", "token_bytes.pt"), weights_only=True)
    want = [len(t) for t, _ in sorted(rb.items(), key=lambda kv: kv[1])] + [0] * len(sb)
    if tb.dtype != torch.int32 or tb.tolist() != want:
        sys.exit(f"token_bytes.pt is not the byte length of every token ({tb.dtype}, {tb.shape})")
    if enc_b is not None:
        text = "The kernel's documentation: 12345 tokens, don't panic!\n\n  indented\tcode()"
        if enc_a.encode_ordinary(text) != enc_b.encode_ordinary(text) or enc_b.n_vocab != len(rb) + len(sb):
            sys.exit("tiktoken encodes differently with the exported tokenizer.pkl")
    print(f"{len(a)} tensors bit-identical, meta and tokenizer equal ({'tiktoken' if enc_b is not None else 'no tiktoken'})")


def loss(root, nc, batch):
    sys.path.insert(0, os.path.join(root, "tools", "reference"))
    import safetensors_io
    from model import GPT, Config
    meta = json.load(open(os.path.join(nc, "base_checkpoints", "d2", "meta_000005.json")))
    mc = meta["model_config"]
    cfg = Config(mc["n_layer"], mc["n_embd"], mc["n_head"], mc["n_kv_head"], mc["n_embd"] // mc["n_head"], mc["vocab_size"],
                 mc["sequence_len"], mc["window_pattern"])
    sd = torch.load(os.path.join(nc, "base_checkpoints", "d2", "model_000005.pt"), weights_only=True)
    model = GPT(cfg).to(torch.float64)
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = sd[name].double()
            p.copy_(t[: p.shape[0]] if is_table(name) else t)
    b = safetensors_io.load(batch)
    value, _ = model(torch.from_numpy(b["idx"].astype("int64")), torch.from_numpy(b["tgt"].astype("int64")))
    print(repr(value.item()))


def ids(nc, data, n):
    import struct
    ranks, specials, enc = tokenizer_of(nc)
    by_id = {i: t for t, i in ranks.items()}
    raw = open(os.path.join(data, "train.bin"), "rb").read()
    num_docs, num_tokens = struct.unpack_from("<QQ", raw, 24)
    starts = struct.unpack_from(f"<{num_docs + 1}Q", raw, 64)
    toks = struct.unpack_from(f"<{num_tokens}H", raw, 64 + 8 * (num_docs + 1))
    checked = 0
    for d in range(min(int(n), num_docs)):
        doc = list(toks[starts[d] + 1:starts[d + 1]])  # after <|bos|>
        text = b"".join(by_id[i] for i in doc)
        if enc is not None:
            try:
                s = text.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if enc.encode_ordinary(s) != doc:
                sys.exit(f"document {d}: tiktoken with the exported tokenizer.pkl gives other ids than ringtrain")
        checked += 1
    if checked < min(int(n), num_docs) * 9 // 10:
        sys.exit(f"only {checked} of {min(int(n), num_docs)} documents are UTF-8 text to compare")
    print(f"{checked} documents: {'tiktoken gives the same ids' if enc is not None else 'decoded (no tiktoken)'}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(*sys.argv[2:8])
    elif cmd == "compare":
        compare(*sys.argv[2:4])
    elif cmd == "loss":
        loss(*sys.argv[2:5])
    elif cmd == "ids":
        ids(*sys.argv[2:5])
    else:
        sys.exit("usage: nanochat_files.py make|compare|loss ...")
