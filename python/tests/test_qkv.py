"""The fused QKV projection against the numpy reference: exact mode (small fp4 values and
power-of-two scales, so every fp32 sum is exact: outputs and cache contents must equal the
reference's rounding bit for bit), and random quantised data within contract §4's tolerance.
The whole cache storage is compared, so a write to a wrong place shows."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv

ISAS = sorted({"scalar", quantkv.max_supported_isa()} | ({"avx2"} if quantkv.max_supported_isa() == "avx512" else set()))
KV_HEADS, HEAD = 2, 16


def kv_cache(dtype, cache_lens, seq_lens, kv_dim=2, page_size=4, reserve=None):
    b = len(cache_lens)
    pages = max(-(-(c + s) // page_size) for c, s in zip(cache_lens, seq_lens)) + 1
    cache = quantkv.PagedKVCache(b * pages + 2, dtype=dtype, kv_dim=kv_dim, num_layers=2,
                                 page_size=page_size, num_heads=KV_HEADS, head_size=HEAD,
                                 batch_size=b, max_pages_per_seq=pages, seed=3)
    for i, (c, s) in enumerate(zip(cache_lens, seq_lens)):
        if reserve is None or reserve[i]:
            cache.reserve(i, c + s)
        cache.set_cache_length(i, c if reserve is None or reserve[i] else 0)
    return cache, np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.uint32)


def encode_like_cache(c, dtype):
    """The cache's storage of float64 values c (exact in fp32 here), rounded once."""
    c32 = c.astype(np.float32)
    return {"float32": lambda: c32, "float16": lambda: c32.astype(np.float16),
            "bfloat16": lambda: ref.encode_bf16(c32), "float8_e4m3fn": lambda: ref.encode_e4m3(c32)}[dtype]()


def expected_blocks(cache, before, c, offs, q_dim, layer):
    """The storage after the op, built by hand: row m's K/V columns at position
    cache_len[b] + i of its sequence; rows of sequences without pages are skipped."""
    blocks = before.copy()
    width = KV_HEADS * HEAD
    stored = encode_like_cache(c[:, q_dim:], cache.dtype)
    for b in range(len(offs) - 1):
        for i in range(int(offs[b + 1] - offs[b])):
            m, pos = int(offs[b]) + i, cache.cache_length(b) + i
            page = int(cache.lookup_table[b, pos // cache.page_size])
            if page >= cache.num_blocks:
                continue
            for kv in range(cache.kv_dim):
                blocks[page, kv, layer, pos % cache.page_size] = \
                    stored[m, kv * width:(kv + 1) * width].reshape(KV_HEADS, HEAD)
    return blocks


def exact_operands(rng, fmt, m, n, k):
    """fp4/fp8 codes of small values, scales in {0.5, 1, 2} (NVFP4 scales with random sign
    bits: the contract takes magnitudes)."""
    sfv, fp4, e8m0 = ref.FORMATS[fmt]

    def data(rows):
        vals = rng.choice([-2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3], size=(rows, k))
        return ref.pack_e2m1(ref.encode_e2m1(vals)) if fp4 else ref.encode_e4m3(vals)

    def scales(rows):
        s = rng.choice([0.5, 1.0, 2.0], size=(rows, k // sfv))
        codes = ref.encode_e8m0(s) if e8m0 else ref.encode_e4m3(s) | \
            (rng.integers(0, 2, size=s.shape) * 0x80).astype(np.uint8)
        return ref.swizzle_scales(codes)

    return data(m), scales(m), data(n), scales(n)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16", "float8_e4m3fn"])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_exact_mode_equals_reference(fmt, dtype, rng):
    cache_lens, seq_lens, q_dim, k, layer = [3, 1, 6], [2, 0, 5], 24, 64, 1
    cache, offs = kv_cache(dtype, cache_lens, seq_lens)
    m, n = int(offs[-1]), q_dim + 2 * KV_HEADS * HEAD
    hs, hs_s, w, w_s = exact_operands(rng, fmt, m, n, k)
    tensor_sf = 1.0 if fmt == "mxfp8" else 0.5  # MXFP8 requires 1 (contract §4)
    c, _ = ref.fused_qkv(hs, hs_s, w, w_s, fmt, k, tensor_sf)
    poison = rng.integers(0, 256, size=cache.blocks.nbytes, dtype=np.uint8)
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        cache.blocks.view(np.uint8).reshape(-1)[:] = poison
        before = cache.blocks.copy()
        out = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            hs, offs, w, hs_s, w_s, cache, tensor_sf, layer, fmt)
        assert out.dtype == np.uint16 and out.shape == (m, q_dim)
        np.testing.assert_array_equal(out, ref.encode_bf16(c[:, :q_dim].astype(np.float32)),
                                      err_msg=f"{fmt} {dtype} {isa} output")
        want = expected_blocks(cache, before, c, offs, q_dim, layer)
        assert cache.blocks.tobytes() == want.tobytes(), f"{fmt} {dtype} {isa} cache contents"
    quantkv.set_isa_level(quantkv.max_supported_isa())


def test_section_scales_mla_cache_and_sentinel_rows(rng):
    """kv_dim 1 (every column after q_dim goes to K), per-section factors, and a sequence
    without pages: its rows' Q is computed, its K is not stored anywhere."""
    fmt, k, q_dim, layer = "nvfp4", 32, 8, 0
    cache, offs = kv_cache("float32", [2, 0], [3, 4], kv_dim=1, reserve=[True, False])
    m, n = int(offs[-1]), q_dim + KV_HEADS * HEAD
    hs, hs_s, w, w_s = exact_operands(rng, fmt, m, n, k)
    sf = (2.0, 0.25, 8.0)
    per_col = np.concatenate([np.full(q_dim, sf[0]), np.full(n - q_dim, sf[1])])
    c, _ = ref.fused_qkv(hs, hs_s, w, w_s, fmt, k, per_col)
    before = cache.blocks.copy()
    out = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs, w, hs_s, w_s, cache, sf, layer, fmt)
    np.testing.assert_array_equal(out, ref.encode_bf16(c[:, :q_dim].astype(np.float32)))
    want = expected_blocks(cache, before, c, offs, q_dim, layer)
    assert cache.blocks.tobytes() == want.tobytes()


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
def test_random_quantised_within_tolerance(fmt, rng):
    cache_lens, seq_lens, q_dim, k, layer = [0, 9], [7, 130], 40, 256, 0
    cache, offs = kv_cache("bfloat16", cache_lens, seq_lens, page_size=16)
    m, n = int(offs[-1]), q_dim + 2 * KV_HEADS * HEAD
    x = rng.normal(size=(m, k)).astype(np.float32)
    wt = (rng.normal(size=(n, k)) * 0.05).astype(np.float32)
    g_a = 448 * 6 / float(np.abs(x).max()) if fmt == "nvfp4" else 1.0
    g_w = 448 * 6 / float(np.abs(wt).max()) if fmt == "nvfp4" else 1.0
    hs, hs_s = quantkv.quantize_dynamic_block_scaled(x, fmt, g_a)
    w, w_s = quantkv.quantize_dynamic_block_scaled(wt, fmt, g_w)
    tensor_sf = 1.0 / (g_a * g_w)
    c, mag = ref.fused_qkv(hs, hs_s, w, w_s, fmt, k, tensor_sf)
    out = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs, w, hs_s, w_s, cache, tensor_sf, layer, fmt, num_threads=2)
    # 1 bf16 ulp (2^-7 relative, bounded by 2^-8 of the value's binade times 2) plus the fp32
    # accumulation error of K terms.
    acc = k * 2.0**-23 * mag * tensor_sf
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(c), 1e-30))) - 7)
    got = ref.decode_bf16(out).astype(np.float64)
    assert np.all(np.abs(got - c[:, :q_dim]) <= ulp[:, :q_dim] + acc[:, :q_dim])
    for b in range(2):
        rows = slice(int(offs[b]), int(offs[b + 1]))
        c0 = cache.cache_length(b)
        for kv in range(2):
            cols = slice(q_dim + kv * KV_HEADS * HEAD, q_dim + (kv + 1) * KV_HEADS * HEAD)
            stored = cache.read(b, kv=kv, layer=layer, start=c0, stop=c0 + seq_lens[b])
            stored = stored.reshape(seq_lens[b], -1).astype(np.float64)
            assert np.all(np.abs(stored - c[rows, cols]) <= ulp[rows, cols] + acc[rows, cols])


def test_bad_input(rng):
    cache, offs = kv_cache("bfloat16", [0], [4])
    hs, hs_s, w, w_s = exact_operands(rng, "nvfp4", 4, 8 + 2 * KV_HEADS * HEAD, 32)
    op = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4
    with pytest.raises(ValueError, match=r"hidden_state: expected dtype uint8, got float32"):
        op(hs.astype(np.float32), offs, w, hs_s, w_s, cache)
    with pytest.raises(ValueError, match="weight|output"):  # N != q_dim + 2 * H * D
        op(hs, offs, w, hs_s, w_s, cache, q_dim=9)
    with pytest.raises(ValueError, match="input_row_offsets"):
        op(hs, [0, 5], w, hs_s, w_s, cache)
    with pytest.raises(ValueError, match="input_scale"):
        op(hs, offs, w, hs_s[:, :, :16], w_s, cache)
    with pytest.raises(ValueError, match="format"):
        op(hs, offs, w, hs_s, w_s, cache, format="fp6")
    hs8, hs8_s, w8, w8_s = exact_operands(rng, "mxfp8", 4, 8 + 2 * KV_HEADS * HEAD, 32)
    with pytest.raises(ValueError, match="tensor_sf"):  # MXFP8 requires tensor_sf == 1
        op(hs8, offs, w8, hs8_s, w8_s, cache, 0.5, format="mxfp8")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_prepared_weights_bit_identical(fmt, rng):
    cache_lens, seq_lens, q_dim, k = [1, 4], [3, 6], 16, 64
    m, n = sum(seq_lens), q_dim + 2 * KV_HEADS * HEAD
    x = rng.normal(size=(m, k)).astype(np.float32)
    wt = rng.normal(size=(n, k)).astype(np.float32)
    g = 448 * 6 / 5.0 if fmt == "nvfp4" else 1.0
    hs, hs_s = quantkv.quantize_dynamic_block_scaled(x, fmt, g)
    w, w_s = quantkv.quantize_dynamic_block_scaled(wt, fmt, g)
    sf = (1 / g**2, 2 / g**2, 0.5 / g**2) if fmt != "mxfp8" else 1.0
    prepared = quantkv.prepare_qkv_weights(w, w_s, fmt)
    assert (prepared.format, prepared.n, prepared.k) == (fmt, n, k)
    results = []
    for weight, weight_scale in ((w, w_s), (prepared, None)):
        cache, offs = kv_cache("bfloat16", cache_lens, seq_lens)
        out = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
            hs, offs, weight, hs_s, weight_scale, cache, sf, format=fmt)
        results.append((out, cache.blocks.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1].tobytes() == results[1][1].tobytes()
    op = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4
    with pytest.raises(ValueError, match="weight_scale: expected None with prepared weights"):
        op(hs, offs, prepared, hs_s, w_s, cache, sf)
    other = "mxfp4" if fmt == "nvfp4" else "nvfp4"
    with pytest.raises(ValueError, match="format: the weights were prepared for"):
        op(hs, offs, prepared, hs_s, None, cache, sf, format=other)
