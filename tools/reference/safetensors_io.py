"""Minimal safetensors reader/writer (json header + raw little-endian data) on numpy.

Layout: u64 little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data buffer; offsets are relative to the start of that buffer.
"""
import json
import struct

import numpy as np

_NUMPY_OF = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_,
}
_TAG_OF = {np.dtype(v).str.lstrip("<>|="): k for k, v in _NUMPY_OF.items()}


class SafetensorsError(Exception):
    """A file is not valid safetensors; the message names the file and the problem."""


def _bf16_to_f32(raw):
    """bfloat16 is the top half of a float32: widen by shifting into the high bits."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def load(path):
    """Return {name: numpy array} (BF16 widened to float32), in file order."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors header; pass a .safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise SafetensorsError(f"{path}: header length {n} exceeds file size; file is truncated or not safetensors")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON ({e}); file is not safetensors")
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tag, shape = info["dtype"], tuple(info["shape"])
        begin, end = info["data_offsets"]
        if end > len(data) or begin > end:
            raise SafetensorsError(f"{path}: tensor {name} offsets {begin}..{end} out of range; file is truncated")
        raw = data[begin:end]
        if tag == "BF16":
            arr = _bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif tag in _NUMPY_OF:
            arr = np.frombuffer(raw, dtype=np.dtype(_NUMPY_OF[tag]).newbyteorder("<"))
        else:
            raise SafetensorsError(f"{path}: tensor {name} has unsupported dtype {tag}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise SafetensorsError(f"{path}: tensor {name} has {arr.size} elements, shape {list(shape)} needs {count}")
        out[name] = arr.reshape(shape).copy()
    return out


def save(path, tensors, metadata=None):
    """Write {name: numpy array or torch tensor}; arrays keep their dtype (little-endian)."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, arr in tensors.items():
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        key = arr.dtype.str.lstrip("<>|=")
        if key not in _TAG_OF:
            raise SafetensorsError(f"{path}: cannot store {name} of dtype {arr.dtype}")
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _TAG_OF[key], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # align the data buffer to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
