"""Tensors of any framework, zero-copy: ml_dtypes and torch low-precision dtypes taken as their
bits (wrong width or kind: a named error), results in the caller's framework, outputs written
in place into the caller's numpy / ml_dtypes / torch memory (same data pointer, checked bytes)."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv
from test_indexer import fill_exact_keys, k_cache
from test_qkv import exact_operands, kv_cache

ml_dtypes = pytest.importorskip("ml_dtypes")


def indexer_inputs(rng, d=32, h=2):
    cache, offs = k_cache([3, 5], [2, 4], d)
    fill_exact_keys(rng, cache, 0, d)
    t = int(offs[-1])
    q = ref.encode_e4m3(rng.integers(-3, 4, size=(t, h, d)).astype(np.float32))
    q_s = rng.integers(-2, 4, size=(t, h)).astype(np.float32)
    return q, q_s, offs, cache


def test_ml_dtypes_inputs_are_their_bits(rng):
    q, q_s, offs, cache = indexer_inputs(rng)
    expected = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 4)
    got = quantkv.mla_indexer_ragged_float8_paged(q.view(ml_dtypes.float8_e4m3fn), q_s, offs, cache, 4)
    np.testing.assert_array_equal(got, expected)
    x = rng.normal(size=(8, 64)).astype(np.float32)
    bits = ref.encode_bf16(x)
    for fn in (quantkv.decode_bf16,):
        np.testing.assert_array_equal(fn(bits.view(ml_dtypes.bfloat16)), fn(bits))
    # ml_dtypes in, ml_dtypes out: the same bits, typed (numpy in: uint8 bits).
    d, s = quantkv.quantize_dynamic_block_scaled(bits.view(ml_dtypes.bfloat16), "mxfp8")
    d2, s2 = quantkv.quantize_dynamic_block_scaled(bits, "mxfp8")
    assert (d.dtype, s.dtype, d2.dtype, s2.dtype) == (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu,
                                                      np.uint8, np.uint8)
    np.testing.assert_array_equal(d.view(np.uint8), d2)
    np.testing.assert_array_equal(s.view(np.uint8), s2)
    # ml_dtypes has no packed fp4 type: NVFP4 data stays uint8, its e4m3 scales are typed.
    d, s = quantkv.quantize_dynamic_block_scaled(bits.view(ml_dtypes.bfloat16), "nvfp4")
    d2, s2 = quantkv.quantize_dynamic_block_scaled(bits, "nvfp4")
    assert (d.dtype, s.dtype) == (np.uint8, ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(d, d2)
    np.testing.assert_array_equal(s.view(np.uint8), s2)
    # e8m0 scales and e4m3 data, as the GEMM's inputs, give the same bytes as uint8.
    cache2, offs2 = kv_cache("float32", [1], [2])
    hs, hs_s, w, w_s = exact_operands(rng, "mxfp8", 2, 8 + 2 * 2 * 16, 64)
    plain = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs2, w, hs_s, w_s, cache2, 1.0, 0, "mxfp8")
    typed = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs.view(ml_dtypes.float8_e4m3fn), offs2, w.view(ml_dtypes.float8_e4m3fn),
        hs_s.view(ml_dtypes.float8_e8m0fnu), w_s.view(ml_dtypes.float8_e8m0fnu), cache2, 1.0, 0, "mxfp8")
    assert (typed.dtype, plain.dtype) == (ml_dtypes.bfloat16, np.uint16)
    np.testing.assert_array_equal(typed.view(np.uint16), plain)


def test_wrong_width_or_kind_is_a_named_error(rng):
    q, q_s, offs, cache = indexer_inputs(rng)
    with pytest.raises(ValueError, match=r"q: expected dtype uint8 \(float8_e4m3fn bits\) or float8_e4m3fn, got bfloat16"):
        quantkv.mla_indexer_ragged_float8_paged(np.zeros(q.shape, ml_dtypes.bfloat16), q_s, offs, cache, 4)
    with pytest.raises(ValueError, match="q: expected dtype .* got float8_e8m0fnu"):
        quantkv.mla_indexer_ragged_float8_paged(q.view(ml_dtypes.float8_e8m0fnu), q_s, offs, cache, 4)
    # ml_dtypes' float4_e2m1fn holds one value per byte: not packed fp4 data.
    with pytest.raises(ValueError, match="hidden_state: expected dtype uint8, got float4_e2m1fn"):
        quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            np.zeros((2, 16), ml_dtypes.float4_e2m1fn), [0, 2], np.zeros((40, 16), np.uint8),
            np.zeros((1, 1, 32, 4, 4), np.uint8), np.zeros((1, 1, 32, 4, 4), np.uint8),
            kv_cache("float32", [0], [2])[0])
    with pytest.raises(ValueError, match="x: expected dtype float32, bfloat16 or uint16 .* got float8_e4m3fn"):
        quantkv.quantize_dynamic_block_scaled(np.zeros((2, 32), ml_dtypes.float8_e4m3fn))


def test_outputs_land_in_the_callers_numpy_and_ml_dtypes_arrays(rng):
    q, q_s, offs, cache = indexer_inputs(rng)
    expected = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 4)
    out = np.full((q.shape[0], 4), 99, np.int32)
    address = out.ctypes.data
    assert quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 4, out=out) is out
    assert out.ctypes.data == address
    np.testing.assert_array_equal(out, expected)

    cache2, offs2 = kv_cache("float32", [1], [3])
    hs, hs_s, w, w_s = exact_operands(rng, "nvfp4", 3, 8 + 2 * 2 * 16, 32)
    plain = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs2, w, hs_s, w_s, cache2)
    out_bf16 = np.zeros((3, 8), ml_dtypes.bfloat16)
    address = out_bf16.ctypes.data
    got = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs2, w, hs_s, w_s, cache2, out=out_bf16)
    assert got is out_bf16 and out_bf16.ctypes.data == address
    assert out_bf16.tobytes() == plain.tobytes()


def test_cache_view_over_numpy_arrays_equals_the_owning_cache(rng):
    """The same K store and indexer through a PagedCacheView of copies of an owning cache's
    arrays: the view's blocks get exactly the owning cache's bytes, the indices agree."""
    d = 32
    cache, offs = k_cache([3, 5], [2, 4], d)
    fill_exact_keys(rng, cache, 0, d)
    blocks, scales = cache.blocks.copy(), cache.scales.copy()
    view = quantkv.PagedCacheView(blocks, cache.cache_lengths.astype(np.int32),
                                  cache.lookup_table.copy(), scales)
    assert (view.num_blocks, view.page_size, view.head_size, view.scale_granularity) == \
        (cache.num_blocks, cache.page_size, d, d)
    assert view.dtype == "float8_e4m3fn" and view.blocks is blocks
    k = rng.normal(size=(int(offs[-1]), d)).astype(np.float32)
    quantkv.indexer_k_store(k, offs, cache)
    quantkv.indexer_k_store(k, offs, view)
    assert blocks.tobytes() == cache.blocks.tobytes() and scales.tobytes() == cache.scales.tobytes()
    q = ref.encode_e4m3(rng.integers(-3, 4, size=(int(offs[-1]), 2, d)).astype(np.float32))
    q_s = np.ones((int(offs[-1]), 2), np.float32)
    np.testing.assert_array_equal(quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, view, 5),
                                  quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 5))


def test_cache_view_bad_arrays_are_named_errors():
    blocks = np.zeros((4, 1, 1, 4, 1, 32), np.uint8)
    lengths, table = np.zeros(2, np.uint32), np.zeros((2, 2), np.uint32)
    with pytest.raises(ValueError, match="blocks: expected rank 6"):
        quantkv.PagedCacheView(blocks[0], lengths, table)
    with pytest.raises(ValueError, match="blocks: expected dtype float32, bfloat16"):
        quantkv.PagedCacheView(blocks.astype(np.int16), lengths, table)
    with pytest.raises(ValueError, match="blocks: expected a C-contiguous array"):
        quantkv.PagedCacheView(blocks[::2], lengths, table)
    with pytest.raises(ValueError, match="cache_lengths: expected dtype uint32, got float32"):
        quantkv.PagedCacheView(blocks, lengths.astype(np.float32), table)
    with pytest.raises(ValueError, match="scales: expected the first five extents"):
        quantkv.PagedCacheView(blocks, lengths, table, np.zeros((3, 1, 1, 4, 1, 1), np.float32))
    with pytest.raises(ValueError, match="cache"):
        quantkv.PagedCacheView(blocks, lengths, np.zeros((3, 2), np.uint32))
    with pytest.raises(TypeError, match="k_cache: expected a PagedKVCache or a PagedCacheView, got ndarray"):
        quantkv.mla_indexer_ragged_float8_paged(np.zeros((1, 1, 32), np.uint8), np.ones((1, 1), np.float32),
                                                [0, 1], blocks, 1)
