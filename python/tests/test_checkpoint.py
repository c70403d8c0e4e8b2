"""Checkpoint loaders from Python: q/k/v checkpoints in the four layouts, written by
checkpoint_files.py (numpy only, random codes, per-shard global scales), loaded with
quantkv.load_qkv_checkpoint and run through the fused QKV, weight-only (bf16 activations)
and W4A4 (activations quantised by the library), against fp64 on the dequantised weights."""
import numpy as np
import pytest

import checkpoint_files as ckf
import numpy_reference as ref
import quantkv

KV_HEADS, HEAD = 2, 32  # k/v shards of 64 rows
FMT = {"nvfp4-compressed-tensors": "nvfp4", "nvfp4-modelopt": "nvfp4", "mxfp4": "mxfp4", "mxfp8": "mxfp8"}


def cache_for(seq_lens):
    pages = max(-(-s // 4) for s in seq_lens) + 1
    cache = quantkv.PagedKVCache(len(seq_lens) * pages + 1, dtype="float32", kv_dim=2, num_layers=1,
                                 page_size=4, num_heads=KV_HEADS, head_size=HEAD,
                                 batch_size=len(seq_lens), max_pages_per_seq=pages, seed=5)
    for b, s in enumerate(seq_lens):
        cache.reserve(b, s)
    return cache, np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.uint32)


def kv_of(cache, offs):
    """K and V [M, H*D] read back through the page table."""
    ks, vs = [], []
    for b in range(len(offs) - 1):
        pos = np.arange(int(offs[b + 1] - offs[b]))
        ks.append(ref.cache_rows(cache, b, pos, kv=0)[0].reshape(len(pos), -1))
        vs.append(ref.cache_rows(cache, b, pos, kv=1)[0].reshape(len(pos), -1))
    return np.concatenate(ks), np.concatenate(vs)


def rel_err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("layout", ckf.LAYOUTS)
def test_checkpoint_loads_and_runs(tmp_path, rng, layout):
    path = str(tmp_path / "ckpt.safetensors")
    w64 = ckf.write_checkpoint(path, layout, seed=int(rng.integers(1 << 30)))
    ck = quantkv.load_qkv_checkpoint(path, ckf.PREFIX)
    assert (ck.q_rows, ck.k_rows, ck.v_rows) == (128, 64, 64)
    assert ck.weights.format == FMT[layout] and ck.weights.k == 256
    nv = layout.startswith("nvfp4")
    # Per-shard factors from the calibration amaxes, the activation scale of the largest one.
    want_factor = [a / ckf.FP4_FP8_MAX if nv else 1.0 for a in ckf.WEIGHT_AMAX]
    np.testing.assert_allclose(ck.weight_factor, want_factor, rtol=1e-6)
    assert ck.input_global == pytest.approx(ckf.FP4_FP8_MAX / max(ckf.INPUT_AMAX) if nv else 1.0, rel=1e-6)
    np.testing.assert_allclose(quantkv.dequantize_qkv_checkpoint(path, ckf.PREFIX), w64, rtol=1e-6, atol=0)
    names = [p["name"] for p in quantkv.list_quantized_projections(path)]
    assert names == [f"{ckf.PREFIX}.{s}_proj" for s in "kqv"]

    seq_lens = [5, 11]
    m = sum(seq_lens)
    x = ref.decode_bf16(ref.encode_bf16(rng.normal(size=(m, 256)).astype(np.float32))).astype(np.float64)
    q_cols = slice(0, 128)

    # Weight-only: bf16 activations, the weight's own factors.
    cache, offs = cache_for(seq_lens)
    q = quantkv.fused_qkv_weight_only(ref.encode_bf16(x.astype(np.float32)), offs, ck.weights, cache,
                                      ck.weight_factor)
    want = x @ w64.T
    k, v = kv_of(cache, offs)
    # fp32 block sums and accumulation: far below 1e-5; Q is rounded to bf16 (2^-9 relative).
    assert rel_err(ref.decode_bf16(q), want[:, q_cols]) < 4e-3
    assert rel_err(k, want[:, 128:192]) < 1e-5
    assert rel_err(v, want[:, 192:256]) < 1e-5
    # One factor for every section is the triple of it (the same scale argument as the W4A4 call).
    f = ck.weight_factor[0]
    one = quantkv.fused_qkv_weight_only(ref.encode_bf16(x.astype(np.float32)), offs, ck.weights,
                                        cache_for(seq_lens)[0], f)
    three = quantkv.fused_qkv_weight_only(ref.encode_bf16(x.astype(np.float32)), offs, ck.weights,
                                          cache_for(seq_lens)[0], (f, f, f))
    np.testing.assert_array_equal(one, three)

    # W4A4 / MXFP8: activations quantised with the checkpoint's input global scale.
    fmt = FMT[layout]
    data, scales = quantkv.quantize_dynamic_block_scaled(x.astype(np.float32), fmt, ck.input_global)
    xq = ref.dequantize(data, scales, fmt, m, 256) / (ck.input_global if nv else 1.0)
    cache, offs = cache_for(seq_lens)
    q = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        data, offs, ck.weights, scales, None, cache, ck.gemm_scales)
    want = xq @ w64.T
    k, v = kv_of(cache, offs)
    assert rel_err(ref.decode_bf16(q), want[:, q_cols]) < 4e-3
    assert rel_err(k, want[:, 128:192]) < 1e-5
    assert rel_err(v, want[:, 192:256]) < 1e-5


def test_bad_checkpoint_is_a_value_error(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00[1, 2]          ")
    with pytest.raises(ValueError, match="header is not a JSON object"):
        quantkv.load_qkv_checkpoint(str(path), "x")
    good = str(tmp_path / "good.safetensors")
    ckf.write_checkpoint(good, "mxfp4")
    with pytest.raises(ValueError, match="projection 'nope.q_proj': no quantised weight"):
        quantkv.load_qkv_checkpoint(good, "nope")
