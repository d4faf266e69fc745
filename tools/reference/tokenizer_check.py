#!/usr/bin/python3
"""Checks the output of `ringtrain data prepare` from outside the C++ code.

    /usr/bin/python3 tools/reference/tokenizer_check.py DIR [--docs N]

- tokenizer.tiktoken parses as tiktoken's text format: "base64 rank" lines, ranks 0..N-1,
  ranks 0..255 the single bytes in byte order, no duplicate token bytes (tiktoken keys a
  dict by bytes, so a duplicate would silently lose an id);
- every merged token is a merge of two earlier tokens (byte-level BPE);
- train.bin / val.bin have the documented header, size, offsets and BOS at each document;
- decoding the first N documents of each shard gives back exactly the text of one of the
  source files listed in meta.json (plain-text sources only);
- if the tiktoken package is importable, it loads the file, decodes and encodes the same way
  (required when RINGTRAIN_REQUIRE_TIKTOKEN=1, as in CI's Debian 13 pass).
Exits 1 with a message on the first failure, 77 (skipped) when numpy is missing.
"""
import base64
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError as e:  # a missing precondition: skipped (77, as meson counts it), never passed
    print(f"tokenizer_check: skipped: {e} (install python3-numpy, e.g. with tools/setup.sh)")
    sys.exit(77)

SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]


def fail(msg):
    print("tokenizer_check: FAIL: " + msg)
    sys.exit(1)


def load_ranks(path):
    tokens = []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            b64, rank = line.split()
            if int(rank) != len(tokens):
                fail(f"{path}:{lineno}: rank {rank}, expected {len(tokens)}")
            tokens.append(base64.b64decode(b64, validate=True))
    for i in range(256):
        if tokens[i] != bytes([i]):
            fail(f"rank {i} is {tokens[i]!r}, not the single byte {i}")
    if len(set(tokens)) != len(tokens):
        fail("duplicate token bytes: tiktoken would lose ids")
    return tokens


def check_merges(tokens):
    rank = {t: i for i, t in enumerate(tokens)}
    for i in range(256, len(tokens)):
        t = tokens[i]
        if not any(t[:k] in rank and t[k:] in rank and rank[t[:k]] < i and rank[t[k:]] < i
                   for k in range(1, len(t))):
            fail(f"token {i} {t!r} is not the concatenation of two earlier tokens")


def read_shard(path, vocab):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, tok_bytes, v, ndocs, ntok, _checksum = struct.unpack_from("<8sIIQQQQ", data, 0)
    if magic != b"RTSHARD\0" or version != 1 or tok_bytes != 2:
        fail(f"{path}: bad header {magic!r} v{version} {tok_bytes} bytes/token")
    if v != vocab:
        fail(f"{path}: vocab {v}, tokenizer has {vocab}")
    if len(data) != 64 + 8 * (ndocs + 1) + 2 * ntok:
        fail(f"{path}: size {len(data)} does not match the header")
    starts = np.frombuffer(data, dtype="<u8", count=ndocs + 1, offset=64)
    toks = np.frombuffer(data, dtype="<u2", count=ntok, offset=64 + 8 * (ndocs + 1))
    if starts[0] != 0 or starts[-1] != ntok or np.any(np.diff(starts.astype(np.int64)) <= 0):
        fail(f"{path}: bad document offsets")
    if np.any(toks[starts[:-1]] != vocab - 9):
        fail(f"{path}: a document does not start with <|bos|>")
    if ntok and toks.max() >= vocab:
        fail(f"{path}: token id >= vocab")
    return starts, toks


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    ndocs_check = int(sys.argv[sys.argv.index("--docs") + 1]) if "--docs" in sys.argv else 200
    tokens = load_ranks(os.path.join(out, "tokenizer.tiktoken"))
    vocab = len(tokens) + len(SPECIALS)
    check_merges(tokens)
    meta = json.load(open(os.path.join(out, "meta.json")))
    if meta["vocab_size"] != vocab or meta["bos_id"] != vocab - 9:
        fail(f"meta.json vocab {meta['vocab_size']} / bos {meta['bos_id']} vs tokenizer vocab {vocab}")
    tb = np.fromfile(os.path.join(out, "token_bytes.bin"), dtype="<i4")
    expect = np.array([len(t) for t in tokens] + [0] * len(SPECIALS), dtype=np.int32)
    if not np.array_equal(tb, expect):
        fail("token_bytes.bin does not match the token lengths")
    sources = set()
    for s in meta["sources"]:
        if not s.endswith(".jsonl"):
            with open(s, "rb") as f:
                sources.add(f.read())
    enc = None
    try:
        import tiktoken
        enc = tiktoken.Encoding(name="ringtrain", pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
                                mergeable_ranks={t: i for i, t in enumerate(tokens)},
                                special_tokens={s: len(tokens) + i for i, s in enumerate(SPECIALS)})
    except ImportError:
        # Where the release packages tiktoken, CI insists on it (tools/ci/release_pass.sh).
        if os.environ.get("RINGTRAIN_REQUIRE_TIKTOKEN") == "1":
            fail("tiktoken is not importable but RINGTRAIN_REQUIRE_TIKTOKEN=1: install python3-tiktoken "
                 "(bash tools/setup.sh reference)")
    total_tokens = 0
    for split in ("train", "val"):
        starts, toks = read_shard(os.path.join(out, f"{split}.bin"), vocab)
        total_tokens += len(toks)
        checked = 0
        for d in range(min(ndocs_check, len(starts) - 1)):
            ids = toks[int(starts[d]) + 1:int(starts[d + 1])].tolist()
            text = b"".join(tokens[i] for i in ids)
            if text not in sources and sources and not any(s.endswith(".jsonl") for s in meta["sources"]):
                fail(f"{split} document {d} does not decode to any source file")
            if enc is not None:
                if enc.decode_bytes(ids) != text:
                    fail(f"tiktoken decodes {split} document {d} differently")
                try:
                    s = text.decode("utf-8")
                    if enc.encode_ordinary(s) != ids:
                        fail(f"tiktoken encodes {split} document {d} differently")
                except UnicodeDecodeError:
                    pass
            checked += 1
        print(f"tokenizer_check: {split}: {len(starts) - 1} documents, {len(toks)} tokens, {checked} decoded and matched")
    print(f"tokenizer_check: OK: vocab {vocab}, {len(tokens) - 256} merges, {total_tokens} tokens"
          + (", tiktoken agrees" if enc is not None else " (tiktoken not installed: format and decode checked)"))


if __name__ == "__main__":
    main()
