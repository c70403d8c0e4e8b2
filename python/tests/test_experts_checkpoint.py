"""MoE experts from checkpoints (quantkv.load_experts_checkpoint, list_quantized_experts):
files written with safetensors.numpy.save_file in gpt-oss's Hugging Face layout (stacked MXFP4
blocks and e8m0 scales, a bfloat16 gate_up bias and a float32 down bias) and per expert in NVFP4
compressed-tensors (experts.{e}.gate_proj / up_proj / down_proj), from random codes. The
loaded experts run through quantkv.fused_experts against the float64 numpy mixture of experts of
test_moe.py on the weights decoded here from the raw tensors (within its bound), and equal, bit
for bit, quantkv.prepare_experts fed with the raw tensors and the factors computed here."""
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import numpy_reference as ref
import quantkv
from test_moe import moe64


def decode_fp4(blocks, scales, sfv, factor=1.0):
    """float64 [..., N, K] of packed e2m1 [..., N, K/2] and row-major scales [..., N, K / sfv]."""
    vals = ref.decode_e2m1(ref.unpack_e2m1(blocks))
    s = np.abs(ref.decode_e8m0(scales) if sfv == 32 else ref.decode_e4m3(scales))
    return vals * np.repeat(s, sfv, axis=-1) * factor


def run_and_check(loaded, raw, rng, quantised_equal=True):
    """fused_experts on the loaded experts: within the float64 bound (weight-only) and equal to
    prepare_experts on the raw tensors (weight-only and quantised)."""
    e, h, i = raw["e"], raw["h"], raw["i"]
    t, k = 9, 2
    x = ref.encode_bf16(rng.normal(0, 1, (t, h)).astype(np.float32))
    ids = rng.integers(0, e, (t, k)).astype(np.int32)
    weights = rng.uniform(0.1, 1, (t, k)).astype(np.float32)
    kw = dict(gate_up=loaded.gate_up, activation=loaded.activation, w13_bias=loaded.w13_bias,
              w2_bias=loaded.w2_bias)
    y = quantkv.fused_experts(x, ids, weights, loaded.experts, out_dtype="float32", **kw)
    b13 = None if loaded.w13_bias is None else loaded.w13_bias.astype(np.float64)
    b2 = None if loaded.w2_bias is None else loaded.w2_bias.astype(np.float64)
    want, s = moe64(ref.decode_bf16(x).astype(np.float64), ids, weights.astype(np.float64),
                    raw["d13"], raw["d2"], 0, loaded.activation, loaded.gate_up, b13, b2)
    bound = 2.0 ** -7 * (s + np.abs(want)) + 1e-6
    assert np.all(np.abs(y - want) <= bound), np.max(np.abs(y - want) / bound)
    assert np.count_nonzero(y) > y.size // 2
    direct = quantkv.prepare_experts(raw["w13"], raw["s13"], raw["w2"], raw["s2"], format=raw["fmt"],
                                     w13_alpha=raw["w13_alpha"], w2_alpha=raw["w2_alpha"],
                                     x_global=raw["x_global"], h_global=raw["h_global"],
                                     w3_alpha=raw.get("w3_alpha"))
    for q in (False, True):
        got = quantkv.fused_experts(x, ids, weights, loaded.experts, quantize_activations=q,
                                    out_dtype="float32", **kw)
        ref_y = quantkv.fused_experts(x, ids, weights, direct, quantize_activations=q,
                                      out_dtype="float32", **kw)
        np.testing.assert_array_equal(got, ref_y)


def gpt_oss_checkpoint(rng, e, h, i):
    """{name: array} in the Hugging Face layout and the raw experts."""
    w13 = rng.integers(0, 256, (e, 2 * i, h // 32, 16), dtype=np.uint8)
    s13 = rng.integers(124, 129, (e, 2 * i, h // 32), dtype=np.uint8)
    w2 = rng.integers(0, 256, (e, h, i // 32, 16), dtype=np.uint8)
    s2 = rng.integers(124, 129, (e, h, i // 32), dtype=np.uint8)
    b13 = rng.normal(0, 1, (e, 2 * i)).astype(ml_dtypes.bfloat16)
    b2 = rng.normal(0, 0.5, (e, h)).astype(np.float32)
    p = "model.layers.0.mlp.experts"
    tensors = {p + ".gate_up_proj_blocks": w13, p + ".gate_up_proj_scales": s13,
               p + ".gate_up_proj_bias": b13, p + ".down_proj_blocks": w2,
               p + ".down_proj_scales": s2, p + ".down_proj_bias": b2,
               "model.layers.0.mlp.router.weight": rng.normal(0, 1, (e, h)).astype(np.float32)}
    ones = [1.0] * e
    raw = dict(e=e, h=h, i=i, fmt="mxfp4", w13=w13.reshape(e, 2 * i, h // 2), s13=s13,
               w2=w2.reshape(e, h, i // 2), s2=s2, w13_alpha=ones, w2_alpha=ones, x_global=ones,
               h_global=ones, d13=decode_fp4(w13.reshape(e, 2 * i, h // 2), s13, 32),
               d2=decode_fp4(w2.reshape(e, h, i // 2), s2, 32), b13=b13.astype(np.float32), b2=b2)
    return tensors, raw


def test_gpt_oss_layout_loads_and_runs(rng, tmp_path):
    e, h, i = 4, 96, 64
    tensors, raw = gpt_oss_checkpoint(rng, e, h, i)
    path = str(tmp_path / "model.safetensors")
    save_file(tensors, path)
    loaded = quantkv.load_experts_checkpoint(str(tmp_path), "model.layers.0.mlp.experts")
    assert (loaded.format, loaded.layout) == ("MXFP4 (gpt-oss)", "gpt-oss stacked")
    assert (loaded.gate_up, loaded.activation) == ("interleaved", "swiglu_oai")
    assert (loaded.num_experts, loaded.hidden, loaded.intermediate) == (e, h, i)
    assert loaded.experts.num_experts == e
    np.testing.assert_array_equal(loaded.w13_bias, raw["b13"])
    np.testing.assert_array_equal(loaded.w2_bias, raw["b2"])
    run_and_check(loaded, raw, rng)
    groups = quantkv.list_quantized_experts(path)
    assert groups == [dict(prefix="model.layers.0.mlp.experts", layout="gpt-oss stacked",
                           format="MXFP4 (gpt-oss)", num_experts=e, hidden=h, intermediate=i,
                           gate_up="interleaved", has_bias=True)]


def nvfp4_per_expert_checkpoint(rng, e, h, i):
    """{name: array} of per-expert NVFP4 compressed-tensors projections and the raw experts."""
    p = "model.layers.2.mlp.experts"
    tensors = {}
    w13, s13, w2, s2, a13, a3, a2, xg, hg = [], [], [], [], [], [], [], [], []
    for x in range(e):
        g13, g2 = np.float32(rng.uniform(2000, 6000)), np.float32(rng.uniform(2000, 6000))
        # up's own global scale (expert 0's equal to gate's, as llm-compressor writes them).
        g3 = g13 if x == 0 else np.float32(rng.uniform(2000, 6000))
        ga = {"gate_proj": np.float32(rng.uniform(100, 1000)),
              "up_proj": np.float32(rng.uniform(100, 1000)),
              "down_proj": np.float32(rng.uniform(50, 1000))}
        mats = {}
        for proj, n, k, g in (("gate_proj", i, h, g13), ("up_proj", i, h, g3), ("down_proj", h, i, g2)):
            data = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
            scales = rng.integers(0x20, 0x40, (n, k // 16), dtype=np.uint8)
            base = f"{p}.{x}.{proj}"
            tensors[base + ".weight_packed"] = data
            tensors[base + ".weight_scale"] = scales.view(ml_dtypes.float8_e4m3fn)
            tensors[base + ".weight_global_scale"] = np.array([g], np.float32)
            tensors[base + ".input_global_scale"] = np.array([ga[proj]], np.float32)
            mats[proj] = (data, scales)
        w13.append(np.concatenate([mats["gate_proj"][0], mats["up_proj"][0]]))
        s13.append(np.concatenate([mats["gate_proj"][1], mats["up_proj"][1]]))
        w2.append(mats["down_proj"][0])
        s2.append(mats["down_proj"][1])
        a13.append(float(np.float32(1) / g13))
        a3.append(float(np.float32(1) / g3))
        a2.append(float(np.float32(1) / g2))
        xg.append(float(min(ga["gate_proj"], ga["up_proj"])))  # the dense loaders' rule
        hg.append(float(ga["down_proj"]))
    w13, s13, w2, s2 = np.stack(w13), np.stack(s13), np.stack(w2), np.stack(s2)
    # gate's rows [0, I) scaled by w13_alpha, up's [I, 2I) by w3_alpha.
    row_alpha = np.repeat(np.stack([a13, a3], axis=1), i, axis=1)  # [E, 2I]
    raw = dict(e=e, h=h, i=i, fmt="nvfp4", w13=w13, s13=s13, w2=w2, s2=s2, w13_alpha=a13,
               w3_alpha=a3, w2_alpha=a2, x_global=xg, h_global=hg,
               d13=decode_fp4(w13, s13, 16) * row_alpha[:, :, None],
               d2=decode_fp4(w2, s2, 16) * np.array(a2)[:, None, None])
    return p, tensors, raw


def test_nvfp4_per_expert_loads_and_runs(rng, tmp_path):
    e, h, i = 5, 64, 32
    p, tensors, raw = nvfp4_per_expert_checkpoint(rng, e, h, i)
    path = str(tmp_path / "experts.safetensors")
    save_file(tensors, path)
    loaded = quantkv.load_experts_checkpoint(path, p)
    assert (loaded.format, loaded.layout) == ("NVFP4 (compressed-tensors)", "per expert")
    assert (loaded.gate_up, loaded.activation) == ("halves", "silu")
    assert loaded.w13_bias is None and loaded.w2_bias is None
    assert (loaded.num_experts, loaded.hidden, loaded.intermediate) == (e, h, i)
    run_and_check(loaded, raw, rng)
    assert [g["prefix"] for g in quantkv.list_quantized_experts(path)] == [p]
    # The layout override: this checkpoint has no stacked tensors.
    with pytest.raises(ValueError, match=r"'model\.layers\.2\.mlp\.experts\.gate_up_proj_blocks'.*missing"):
        quantkv.load_experts_checkpoint(path, p, layout="gpt-oss")
    with pytest.raises(ValueError, match="layout: expected 'auto'"):
        quantkv.load_experts_checkpoint(path, p, layout="stacked")


def test_errors_name_the_tensor(rng, tmp_path):
    p, tensors, _ = nvfp4_per_expert_checkpoint(rng, 3, 64, 32)
    bad = {k: v for k, v in tensors.items() if not k.startswith(f"{p}.2.down_proj")}
    path = str(tmp_path / "missing.safetensors")
    save_file(bad, path)
    with pytest.raises(ValueError, match=r"projection 'model\.layers\.2\.mlp\.experts\.2\.down_proj'"):
        quantkv.load_experts_checkpoint(path, p)
    with pytest.raises(ValueError, match="no experts"):
        quantkv.load_experts_checkpoint(path, "model.layers.7.mlp.experts")
