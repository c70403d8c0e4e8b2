"""fused_qk_rope_ragged and the indexer front end from Python, against numpy written here."""
import numpy as np
import pytest

import quantkv


def bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rope_numpy(x, cs, layout):
    x = x.astype(np.float64).copy()
    half = x.shape[-1] // 2
    c, s = cs[0::2].astype(np.float64), cs[1::2].astype(np.float64)
    if layout == "interleaved":
        a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
        x[..., 0::2], x[..., 1::2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half].copy(), x[..., half:].copy()
        x[..., :half], x[..., half:] = a * c - b * s, a * s + b * c
    return x


@pytest.mark.parametrize("layout", ["interleaved", "half_split"])
def test_fused_qk_rope_ragged(layout):
    rng = np.random.default_rng(7)
    d, rope_dim, hq = 48, 16, 2
    cache = quantkv.PagedKVCache(6, dtype="float32", kv_dim=2, num_layers=1, page_size=4, num_heads=1,
                                 head_size=d, batch_size=1, max_pages_per_seq=3, seed=3)
    cache.reserve(0, 9)
    cache.set_cache_length(0, 6)
    offs = np.array([0, 3], dtype=np.uint32)
    cache.write(0, rng.standard_normal((9, 1, d)).astype(np.float32), kv=0)
    cache.write(0, rng.standard_normal((9, 1, d)).astype(np.float32), kv=1)
    k_before, v_before = cache.read_k(0)[:, 0], cache.read_v(0)
    freqs = quantkv.make_freqs_cis(16, rope_dim)
    q = rng.standard_normal((3, hq, d)).astype(np.float32)
    out = quantkv.fused_qk_rope_ragged(q, offs, cache, freqs, rope_layout=layout)
    for t in range(3):
        want = rope_numpy(q[t, :, d - rope_dim:], freqs[6 + t], layout)
        np.testing.assert_allclose(out[t, :, d - rope_dim:], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out[t, :, :d - rope_dim], q[t, :, :d - rope_dim])
    k_after = cache.read_k(0)[:, 0]
    np.testing.assert_array_equal(cache.read_v(0), v_before)
    np.testing.assert_array_equal(k_after[:6], k_before[:6])
    for p in range(6, 9):
        want = rope_numpy(k_before[p, d - rope_dim:], freqs[p], layout)
        np.testing.assert_allclose(k_after[p, d - rope_dim:], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="options.freqs_cis"):
        quantkv.fused_qk_rope_ragged(q, offs, cache, freqs[:, :15])


def test_front_end_matches_numpy_and_rejects_bad_input():
    rng = np.random.default_rng(11)
    t, h, d = 4, 2, 128
    q = bf16_bits(rng.standard_normal((t, h, d)))
    w = rng.standard_normal((t, h)).astype(np.float32)
    freqs = quantkv.make_freqs_cis(8, 64)
    pos = np.arange(t, dtype=np.uint32)
    q8, qs = quantkv.indexer_q_prepare_front_end(q, w, "float", freqs_cis=freqs, position_ids=pos)
    # numpy: half-split RoPE on the leading 64, bf16, Hadamard (scipy-free: Sylvester), bf16.
    hmat = np.array([[1.0]])
    while hmat.shape[0] < d:
        hmat = np.block([[hmat, hmat], [hmat, -hmat]])
    x = bf16_float(q).astype(np.float64)
    for i in range(t):
        x[i, :, :64] = rope_numpy(x[i, :, :64], freqs[i], "half_split")
    x = bf16_float(bf16_bits(x)).astype(np.float64)
    y = bf16_float(bf16_bits(x @ hmat.T / np.sqrt(d))).astype(np.float64)
    scale = np.maximum(np.abs(y).max(axis=-1), 1e-4) / 448.0
    deq = quantkv.decode_e4m3(q8).reshape(t, h, d) * scale[..., None]
    np.testing.assert_allclose(deq, y, rtol=0.07, atol=1e-3)
    np.testing.assert_allclose(qs, w / np.sqrt(h) * scale / np.sqrt(d), rtol=1e-5)
    with pytest.raises(ValueError, match="front_end.rope.position_ids"):
        quantkv.indexer_q_prepare_front_end(q, w, freqs_cis=freqs)
    with pytest.raises(ValueError, match="front_end.hadamard"):
        quantkv.indexer_q_prepare_front_end(q[:, :, :96].copy(), w)
