"""The PyTorch side of `ringtrain import` (embedded in the binary, run with python3): reads a
nanochat checkpoint's model_NNNNNN.pt with PyTorch itself and writes its tensors as a
safetensors file, which the C++ side then checks against the model config.

    python3 - pt2st MODEL.pt OUT.safetensors

Only tensors are read: torch.load(weights_only=True) refuses any other object, so the file
cannot run code. Exit 2 with one line on stderr for a file that is not a state_dict of
float32/bfloat16 tensors."""
import json
import os
import struct
import sys


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(2)


def pt2st(src, dst):
    try:
        import torch
    except ImportError:
        fail("reading a .pt file needs PyTorch for python3 (Debian: apt install python3-torch); or import a .safetensors file")
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


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "pt2st":
        pt2st(sys.argv[2], sys.argv[3])
    else:
        fail("usage: nanochat_helper pt2st MODEL.pt OUT.safetensors")


if __name__ == "__main__":
    main()
