#!/usr/bin/env python3
"""Writes the small seed corpus of each fuzz target: fuzz/corpus/<target>/seed-*.

The targets read their bytes through FuzzedDataProvider (fuzz_input.hpp): integers from the
end of the input, so a short input describes a small consistent call and an exhausted input
makes every defect choice "no". The seeds cover: nothing (all minimums), all-ones (maximum
shapes, every defect branch taken where the byte allows it), a few fixed pseudo-random inputs of
growing length, and patterns of the special bytes (0x7F / 0xFF: fp8 NaN codes, e8m0 NaN).
Deterministic: rerunning gives the same files."""
import json
import os
import random
import struct
import sys



def safetensors_file(entries, metadata=None):
    """entries: (name, dtype, shape, bytes) -> a safetensors file."""
    header, offset, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        data += blob
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    """Well-formed files the parser accepts (so mutations start from valid structure): a plain
    one, metadata, and q/k/v checkpoints the loaders recognise; plus a non-object header."""
    def ct(p):
        return [(p + ".weight_packed", "U8", [4, 16], bytes(64)),
                (p + ".weight_scale", "F8_E4M3", [4, 2], bytes([0x38]) * 8),
                (p + ".weight_global_scale", "F32", [1], struct.pack("<f", 100.0))]

    def ctn(p, n, k):  # an [n, k] NVFP4 compressed-tensors projection
        return [(p + ".weight_packed", "U8", [n, k // 2], bytes(n * k // 2)),
                (p + ".weight_scale", "F8_E4M3", [n, k // 16], bytes([0x38]) * (n * k // 16)),
                (p + ".weight_global_scale", "F32", [1], struct.pack("<f", 100.0))]

    def mx(p):
        return [(p + ".weight_blocks", "U8", [2, 1, 16], bytes(32)), (p + ".weight_scales", "U8", [2, 1], bytes([127, 127]))]

    shards = ["L.q_proj", "L.k_proj", "L.v_proj"]
    return {
        "valid-small": safetensors_file([("a", "U8", [4], b"\1\2\3\4"), ("b", "F32", [1], struct.pack("<f", 1.0))]),
        "metadata": safetensors_file([("x", "BF16", [2], bytes(4))], {"format": "pt"}),
        "nvfp4-ct-qkv": safetensors_file(sum((ct(p) for p in shards), [])),
        "mxfp4-qkv": safetensors_file(sum((mx(p) for p in shards), [])),
        "not-object": struct.pack("<Q", 6) + b"[1, 2]",
        # MoE experts: gpt-oss's stacked MXFP4 (E = 1, H = I = 32) and two per-expert NVFP4 experts.
        "gpt-oss-experts": safetensors_file([
            ("X.gate_up_proj_blocks", "U8", [1, 64, 1, 16], bytes(range(256)) * 4),
            ("X.gate_up_proj_scales", "U8", [1, 64, 1], bytes([127]) * 64),
            ("X.gate_up_proj_bias", "F32", [1, 64], bytes(256)),
            ("X.down_proj_blocks", "U8", [1, 32, 1, 16], bytes(range(256)) * 2),
            ("X.down_proj_scales", "U8", [1, 32, 1], bytes([127]) * 32)]),
        "per-expert-nvfp4": safetensors_file(sum((ctn("E.%d.%s" % (e, p), n, k) for e in range(2)
                                                   for p, n, k in (("gate_proj", 16, 32), ("up_proj", 16, 32),
                                                                   ("down_proj", 32, 16))), [])),
    }


def index_seeds():
    """checkpoint_index_fuzz's inputs are index files over its fixed shards (L.q_proj in file
    1, L.k_proj and L.v_proj in file 2): the right map, a tensor in the wrong file, a missing
    shard, a path outside the directory, a shard that is not safetensors, and broken JSON."""
    shard1, shard2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    suffixes = (".weight_packed", ".weight_scale", ".weight_global_scale")
    right = {f"L.q_proj{x}": shard1 for x in suffixes}
    right.update({f"L.{p}_proj{x}": shard2 for p in "kv" for x in suffixes})

    def index(weight_map):
        return json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode()
    return {
        "index-right": index(right),
        "index-wrong-file": index(dict(right, **{"L.k_proj.weight_scale": shard1})),
        "index-missing-shard": index(dict(right, **{"L.v_proj.weight_packed": "model-00003-of-00003.safetensors"})),
        "index-outside": index(dict(right, **{"L.q_proj.weight_scale": "../" + shard1})),
        "index-not-safetensors": index(dict(right, **{"L.q_proj.weight_packed": "notes.txt"})),
        "index-map-array": json.dumps({"weight_map": [shard1]}).encode(),
        "index-truncated": index(right)[:40],
    }


root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
targets = sys.argv[1:] or sorted(
    f[:-4] for f in os.listdir(os.path.dirname(os.path.abspath(__file__))) if f.endswith("_fuzz.cpp"))
for t in targets:
    d = os.path.join(root, t)
    os.makedirs(d, exist_ok=True)
    rng = random.Random(t)
    seeds = {
        "zeros": bytes(64),
        "ones": bytes([0xFF]) * 256,
        "nan-codes": bytes([0x7F, 0xFF, 0x80, 0x00]) * 128,
        "saturation": bytes([0x7E, 0xFE, 0x43, 0xE0]) * 128,
    }
    for i, n in enumerate((16, 96, 512, 2048)):
        seeds[f"random-{i}"] = bytes(rng.randrange(256) for _ in range(n))
    if t == "safetensors_fuzz":
        seeds.update(safetensors_seeds())
    if t == "checkpoint_index_fuzz":
        seeds.update(index_seeds())
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)
