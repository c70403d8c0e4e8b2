"""Writes small quantised q/k/v checkpoints in the four layouts of docs/checkpoints.md, with
the standard library and numpy only: the safetensors container by hand (8-byte length, JSON
header, raw bytes), random codes instead of a quantiser, and an fp64 decode of every code from
the format definitions (independent of quantkv). q, k and v carry different global scales.

    python3 checkpoint_files.py OUT_DIR   writes OUT_DIR/<layout>.safetensors
"""
import json
import struct
import sys

import numpy as np

LAYOUTS = ("nvfp4-compressed-tensors", "nvfp4-modelopt", "mxfp4", "mxfp8")
PREFIX = "model.layers.0.self_attn"
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
WEIGHT_AMAX = (2.5, 0.3, 7.0)  # per shard: q, k, v
INPUT_AMAX = (3.0, 5.0, 4.0)
FP4_FP8_MAX = 448.0 * 6.0


def e4m3_value(code):
    """OCP e4m3fn: bias 7, subnormals below exponent 1, 0x7F / 0xFF NaN."""
    code = np.asarray(code, dtype=np.int64)
    sign = np.where(code & 0x80, -1.0, 1.0)
    exp = (code >> 3) & 0xF
    man = code & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    return sign * mag


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, bytes)."""
    header, offset, blobs = {}, 0, []
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def shard(layout, rows, k, index, rng):
    """Tensors of one projection and its dequantised fp64 weight [rows, k]."""
    mx8 = layout == "mxfp8"
    block = 16 if layout.startswith("nvfp4") else 32
    kb = k // block
    if mx8:
        data = rng.integers(0, 256, size=(rows, k), dtype=np.uint8)
        data[(data & 0x7F) == 0x7F] = 0x7E  # no NaN codes
        values = e4m3_value(data)
    else:
        data = rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)
        values = np.empty((rows, k))
        values[:, 0::2] = E2M1[data & 0xF]  # even element in the low nibble
        values[:, 1::2] = E2M1[data >> 4]
    if block == 16:
        scales = rng.integers(0x20, 0x58, size=(rows, kb), dtype=np.uint8)  # e4m3 ~ 2^-3..2^4
        scale_values = e4m3_value(scales)
    else:
        scales = rng.integers(120, 132, size=(rows, kb), dtype=np.uint8)  # e8m0
        scale_values = np.exp2(scales.astype(np.float64) - 127)
    weight = values * np.repeat(scale_values, block, axis=1)
    p = f"{PREFIX}.{'qkv'[index]}_proj"
    w_amax, in_amax = WEIGHT_AMAX[index], INPUT_AMAX[index]
    f32 = lambda v: np.float32(v).tobytes()
    if layout == "nvfp4-compressed-tensors":
        g = np.float32(FP4_FP8_MAX / w_amax)
        weight /= float(g)
        tensors = [(p + ".weight_packed", "U8", data.shape, data.tobytes()),
                   (p + ".weight_scale", "F8_E4M3", scales.shape, scales.tobytes()),
                   (p + ".weight_global_scale", "F32", [1], f32(g)),
                   (p + ".input_global_scale", "F32", [1], f32(FP4_FP8_MAX / in_amax))]
    elif layout == "nvfp4-modelopt":
        w2 = np.float32(w_amax / FP4_FP8_MAX)
        weight *= float(w2)
        tensors = [(p + ".weight", "U8", data.shape, data.tobytes()),
                   (p + ".weight_scale", "F8_E4M3", scales.shape, scales.tobytes()),
                   (p + ".weight_scale_2", "F32", [], f32(w2)),
                   (p + ".input_scale", "F32", [], f32(in_amax / FP4_FP8_MAX))]
    elif layout == "mxfp4":
        tensors = [(p + ".weight_blocks", "U8", (rows, kb, 16), data.tobytes()),
                   (p + ".weight_scales", "U8", scales.shape, scales.tobytes())]
    else:
        tensors = [(p + ".weight", "F8_E4M3", data.shape, data.tobytes()),
                   (p + ".weight_scale", "F8_E8M0", scales.shape, scales.tobytes())]
    return tensors, weight


def checkpoint_tensors(layout, q_rows=128, kv_rows=64, k=256, seed=1):
    """The q/k/v checkpoint's tensors (name, dtype, shape, bytes) and its dequantised fp64
    weight [q+k+v rows, k]."""
    rng = np.random.default_rng(seed)
    tensors, weights = [], []
    for i, rows in enumerate((q_rows, kv_rows, kv_rows)):
        t, w = shard(layout, rows, k, i, rng)
        tensors += t
        weights.append(w)
    tensors.append(("model.norm.weight", "BF16", [4], bytes(8)))
    return tensors, np.concatenate(weights)


def write_checkpoint(path, layout, q_rows=128, kv_rows=64, k=256, seed=1):
    """Writes the q/k/v checkpoint; returns the dequantised fp64 weight [q+k+v rows, k]."""
    tensors, weight = checkpoint_tensors(layout, q_rows, kv_rows, k, seed)
    write_safetensors(path, tensors)
    return weight


if __name__ == "__main__":
    for layout in LAYOUTS:
        write_checkpoint(f"{sys.argv[1]}/{layout}.safetensors", layout)
