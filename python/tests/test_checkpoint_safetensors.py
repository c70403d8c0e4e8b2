"""Checkpoints as the Hugging Face tools write them: safetensors.numpy.save_file with ml_dtypes
float8_e4m3fn / float8_e8m0fnu arrays where a layout stores fp8, one file or sharded with a
model.safetensors.index.json (as save_pretrained splits them), and fused qkv_proj tensors.
Each holds the data of checkpoint_files.py, whose hand-written file (the layout the C++ tests
write) is the reference path: the same factors, the same dequantised weight and the same
outputs, bit for bit."""
import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import checkpoint_files as ckf
import numpy_reference as ref
import quantkv
from test_checkpoint import cache_for, kv_of

# The safetensors dtype of each array type, and the array type of each dtype the layouts use.
DTYPES = {"U8": np.uint8, "F32": np.float32, "BF16": ml_dtypes.bfloat16,
          "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E8M0": ml_dtypes.float8_e8m0fnu}
SECTIONS = (128, 64, 64)
# mxfp4-e8m0: MXFP4 with its scales as float8_e8m0fnu instead of gpt-oss's uint8.
LAYOUTS = ckf.LAYOUTS + ("mxfp4-e8m0",)


def arrays(layout, seed):
    """{name: numpy / ml_dtypes array} of the checkpoint and its fp64 dequantised weight."""
    base = "mxfp4" if layout == "mxfp4-e8m0" else layout
    tensors, w64 = ckf.checkpoint_tensors(base, seed=seed)
    out = {}
    for name, dtype, shape, data in tensors:
        if layout == "mxfp4-e8m0" and name.endswith("_scales"):
            dtype = "F8_E8M0"
        out[name] = np.frombuffer(data, dtype=DTYPES[dtype]).reshape(shape)
    return out, w64


def header_and_data(path):
    """The file's JSON header and its data bytes (safetensors' own numpy loader has no fp8
    dtypes: it looks them up on numpy)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), f.read()


def outputs(ck, x_bits, seq_lens=(5, 11)):
    """Q (bf16 bits) and the K, V read back (float32 bits) of the weight-only projection."""
    cache, offs = cache_for(list(seq_lens))
    q = quantkv.fused_qkv_weight_only(x_bits, offs, ck.weights, cache, ck.weight_factor)
    k, v = kv_of(cache, offs)
    return q, k.view(np.uint32), v.view(np.uint32)


def expect_same(ck, want, x_bits):
    """`ck` and `want` (loaded from the hand-written file) are the same load."""
    assert ck.format == want.format
    assert (ck.q_rows, ck.k_rows, ck.v_rows) == (want.q_rows, want.k_rows, want.v_rows)
    assert ck.weight_factor == want.weight_factor and ck.gemm_scales == want.gemm_scales
    assert ck.input_global == want.input_global
    for got, exp in zip(outputs(ck, x_bits), outputs(want, x_bits)):
        np.testing.assert_array_equal(got, exp)


@pytest.fixture
def x_bits(rng):
    return ref.encode_bf16(rng.normal(size=(16, 256)).astype(np.float32))


@pytest.fixture
def reference(tmp_path, rng):
    """Per layout: the hand-written file's path and its load (the C++-tested layout)."""
    seed = int(rng.integers(1 << 30))

    def make(layout):
        path = str(tmp_path / f"hand-{layout}.safetensors")
        tensors, w64 = ckf.checkpoint_tensors("mxfp4" if layout == "mxfp4-e8m0" else layout, seed=seed)
        ckf.write_safetensors(path, tensors)
        return path, quantkv.load_qkv_checkpoint(path, ckf.PREFIX), w64, seed
    return make


@pytest.mark.parametrize("layout", LAYOUTS)
def test_save_file_with_ml_dtypes(tmp_path, reference, x_bits, layout):
    ref_path, want, w64, seed = reference(layout)
    tensors, _ = arrays(layout, seed)
    path = str(tmp_path / "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    # safetensors wrote the arrays with the format's dtypes (fp8 ones for the ml_dtypes arrays)
    # and their bytes.
    h, data = header_and_data(path)
    assert h["__metadata__"] == {"format": "pt"}
    for name, a in tensors.items():
        assert h[name]["dtype"] == {v: k for k, v in DTYPES.items()}[a.dtype.type]
        assert h[name]["shape"] == list(a.shape)
        begin, end = h[name]["data_offsets"]
        assert data[begin:end] == a.tobytes()
    if layout == "mxfp8":
        assert h[f"{ckf.PREFIX}.q_proj.weight"]["dtype"] == "F8_E4M3"
        assert h[f"{ckf.PREFIX}.q_proj.weight_scale"]["dtype"] == "F8_E8M0"

    ck = quantkv.load_qkv_checkpoint(path, ckf.PREFIX)
    expect_same(ck, want, x_bits)
    deq = quantkv.dequantize_qkv_checkpoint(path, ckf.PREFIX)
    np.testing.assert_array_equal(deq, quantkv.dequantize_qkv_checkpoint(ref_path, ckf.PREFIX))
    np.testing.assert_allclose(deq, w64, rtol=1e-6, atol=0)


def save_sharded(directory, tensors, shards):
    """save_pretrained's layout: model-0000i-of-0000n.safetensors, tensors round robin (each
    projection across files), and model.safetensors.index.json with the weight_map."""
    names = sorted(tensors)
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {name: files[i % shards] for i, name in enumerate(names)}
    for f in files:
        save_file({n: tensors[n] for n in names if weight_map[n] == f}, str(directory / f),
                  metadata={"format": "pt"})
    total = sum(a.nbytes for a in tensors.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return weight_map


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sharded_checkpoint(tmp_path, reference, x_bits, layout):
    ref_path, want, _, seed = reference(layout)
    tensors, _ = arrays(layout, seed)
    directory = tmp_path / "sharded"
    directory.mkdir()
    save_sharded(directory, tensors, 3)
    ref_deq = quantkv.dequantize_qkv_checkpoint(ref_path, ckf.PREFIX)
    for path in (str(directory), str(directory / "model.safetensors.index.json")):
        expect_same(quantkv.load_qkv_checkpoint(path, ckf.PREFIX), want, x_bits)
        np.testing.assert_array_equal(quantkv.dequantize_qkv_checkpoint(path, ckf.PREFIX), ref_deq)
        names = [p["name"] for p in quantkv.list_quantized_projections(path)]
        assert names == [f"{ckf.PREFIX}.{s}_proj" for s in "kqv"]


def test_sharded_checkpoint_errors(tmp_path):
    tensors, _ = arrays("nvfp4-compressed-tensors", 3)
    weight_map = save_sharded(tmp_path, tensors, 2)
    index = tmp_path / "model.safetensors.index.json"
    scale = f"{ckf.PREFIX}.k_proj.weight_scale"

    def rewrite(change):
        m = dict(weight_map)
        change(m)
        index.write_text(json.dumps({"weight_map": m}))

    rewrite(lambda m: m.pop(scale))
    with pytest.raises(ValueError, match=f"tensor '{scale}': missing from the weight_map of"):
        quantkv.load_qkv_checkpoint(str(tmp_path), ckf.PREFIX)
    rewrite(lambda m: m.update({scale: "model-00009-of-00009.safetensors"}))
    with pytest.raises(ValueError, match="names shard 'model-00009-of-00009.safetensors': .*cannot open"):
        quantkv.load_qkv_checkpoint(str(tmp_path), ckf.PREFIX)
    other = next(f for f in set(weight_map.values()) if f != weight_map[scale])
    rewrite(lambda m: m.update({scale: other}))
    with pytest.raises(ValueError, match=f"puts it in '{other}', which does not hold it"):
        quantkv.load_qkv_checkpoint(str(tmp_path), ckf.PREFIX)
    index.write_text("{")
    with pytest.raises(ValueError, match="model.safetensors.index.json: not valid JSON"):
        quantkv.load_qkv_checkpoint(str(tmp_path), ckf.PREFIX)


def fused(tensors, per_section):
    """The three projections as one qkv_proj: rows stacked q, k, v; the global scales as one
    (the q shard's) or, with `per_section`, one per section (shape [3])."""
    out = {}
    proj = [f"{ckf.PREFIX}.{s}_proj" for s in "qkv"]
    for name in tensors:
        if not name.startswith(proj[0] + "."):
            continue
        suffix = name[len(proj[0]):]
        parts = [tensors[p + suffix] for p in proj]
        if parts[0].ndim >= 2:
            a = np.concatenate(parts)
        elif per_section:
            a = np.concatenate([p.reshape(1) for p in parts])
        else:
            a = parts[0]
        out[f"{ckf.PREFIX}.qkv_proj{suffix}"] = np.ascontiguousarray(a)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_qkv_proj(tmp_path, reference, x_bits, layout):
    ref_path, want, _, seed = reference(layout)
    tensors, _ = arrays(layout, seed)
    projection = f"{ckf.PREFIX}.qkv_proj"
    # Per-section global scales: the same load as the three shards of the hand-written file.
    path = str(tmp_path / "fused.safetensors")
    save_file(fused(tensors, per_section=True), path)
    ck = quantkv.load_fused_qkv_checkpoint(path, projection, SECTIONS)
    expect_same(ck, want, x_bits)
    np.testing.assert_array_equal(quantkv.dequantize_fused_qkv_checkpoint(path, projection, SECTIONS),
                                  quantkv.dequantize_qkv_checkpoint(ref_path, ckf.PREFIX))
    # One global scale for the tensor: every section takes the q shard's factors.
    save_file(fused(tensors, per_section=False), path)
    ck = quantkv.load_fused_qkv_checkpoint(path, projection, SECTIONS)
    assert ck.weight_factor == (want.weight_factor[0],) * 3
    with pytest.raises(ValueError, match=r"sections: expected q \+ k \+ v = N = 256 rows"):
        quantkv.load_fused_qkv_checkpoint(path, projection, (128, 64, 63))


TORCH_DTYPES = {"U8": "uint8", "F32": "float32", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                "F8_E8M0": "float8_e8m0fnu"}


@pytest.mark.parametrize("layout", ("nvfp4-compressed-tensors", "nvfp4-modelopt", "mxfp4"))
def test_torch_float4_e2m1fn_x2_checkpoint(tmp_path, reference, x_bits, layout):
    """A checkpoint saved by safetensors.torch with the packed e2m1 data as torch's
    float4_e2m1fn_x2 (stored as dtype F4, last extent counting codes): the same load."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as save_torch
    ref_path, want, _, seed = reference(layout)
    tensors, _ = ckf.checkpoint_tensors(layout, seed=seed)
    packed = (".weight_packed", ".weight_blocks", ".q_proj.weight", ".k_proj.weight", ".v_proj.weight")
    out = {}
    for name, dtype, shape, data in tensors:
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        t = raw.view(getattr(torch, TORCH_DTYPES[dtype])).reshape(shape)
        if dtype == "U8" and name.endswith(packed):
            t = t.view(torch.float4_e2m1fn_x2)
        out[name] = t
    path = str(tmp_path / "torch.safetensors")
    save_torch(out, path)
    h, _ = header_and_data(path)
    data_name = {"nvfp4-compressed-tensors": "q_proj.weight_packed", "nvfp4-modelopt": "q_proj.weight",
                 "mxfp4": "q_proj.weight_blocks"}[layout]
    entry = h[f"{ckf.PREFIX}.{data_name}"]
    assert entry["dtype"] == "F4"
    assert entry["shape"][-1] == 2 * out[f"{ckf.PREFIX}.{data_name}"].shape[-1]
    expect_same(quantkv.load_qkv_checkpoint(path, ckf.PREFIX), want, x_bits)
    np.testing.assert_array_equal(quantkv.dequantize_qkv_checkpoint(path, ckf.PREFIX),
                                  quantkv.dequantize_qkv_checkpoint(ref_path, ckf.PREFIX))
