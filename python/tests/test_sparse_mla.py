"""Sparse MLA attention (quantkv.sparse_mla_attention, torch.ops.quantkv.sparse_mla) against a
float64 numpy reference of the semantics in include/quantkv/sparse_mla.hpp: both latent caches
(bf16 rows, and FlashMLA's fp8 rows written here with ml_dtypes: e4m3 codes, one float32 scale
per 128, bf16 rope), -1 slots, tokens without any valid slot (out 0, lse -inf), topk_length,
shapes below / at / above the 128-value blocks and decode / prefill, outputs poisoned, torch in
and out, the torch op eager / compiled / opcheck, errors naming the argument.

The bound: the library computes in float32 and rounds out to bfloat16 (relative 2^-9), so
|out - out64| <= 2^-8 |out64| + 1e-5 max|V| and |lse - lse64| <= 1e-5 (1 + |lse64|), where the
float64 reference runs on the same (dequantised) cache values."""
import ml_dtypes
import numpy as np
import pytest

import quantkv

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn


def bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(BF16)


def fp8_rows(latent, d_v):
    """FlashMLA's fp8 row per slot of a float latent [S, d_v + d_rope]: uint8 [S, row_bytes]
    and the float64 values the row holds (codes times scales, the rope as bf16)."""
    s, d_qk = latent.shape
    nope = latent[:, :d_v].astype(np.float32).reshape(s, d_v // 128, 128)
    scales = np.abs(nope).max(axis=2) / np.float32(448.0)
    scales[scales == 0] = 1.0
    codes = (nope / scales[:, :, None]).astype(E4M3)
    rope = latent[:, d_v:].astype(BF16)
    rows = np.concatenate([codes.reshape(s, d_v).view(np.uint8),
                           scales.astype(np.float32).view(np.uint8).reshape(s, -1),
                           rope.view(np.uint8).reshape(s, -1)], axis=1)
    assert rows.shape[1] == quantkv.sparse_mla_fp8_row_bytes(d_v, d_qk - d_v)
    values = np.concatenate([(codes.astype(np.float64) * scales[:, :, None]).reshape(s, d_v),
                             rope.astype(np.float64)], axis=1)
    return np.ascontiguousarray(rows), values


def reference(q, kv64, indices, sm_scale, d_v, topk_length=None):
    """float64 out [T, H, d_v] and lse [T, H] of the header's semantics."""
    q64 = q.astype(np.float64)
    t_count, h = q.shape[:2]
    out = np.zeros((t_count, h, d_v))
    lse = np.full((t_count, h), -np.inf)
    for t in range(t_count):
        n = indices.shape[1] if topk_length is None else int(topk_length[t])
        sel = indices[t, :n]
        sel = sel[sel >= 0]
        if sel.size == 0:
            continue
        k = kv64[sel]                                # [n, d_qk]
        scores = sm_scale * (q64[t] @ k.T)           # [H, n]
        m = scores.max(axis=1, keepdims=True)
        p = np.exp(scores - m)
        out[t] = (p @ k[:, :d_v]) / p.sum(axis=1, keepdims=True)
        lse[t] = m[:, 0] + np.log(p.sum(axis=1))
    return out, lse


def check(out, lse, want, want_lse, kv64, d_v):
    out = np.asarray(out).astype(np.float64)
    lse = np.asarray(lse)
    vmax = np.abs(kv64[:, :d_v]).max()
    err = np.abs(out - want)
    bound = 2.0**-8 * np.abs(want) + 1e-5 * vmax
    assert (err <= bound).all(), f"out off by {err.max()} (worst excess {(err - bound).max()})"
    empty = np.isinf(want_lse)
    assert np.array_equal(np.isneginf(lse), empty)
    assert (out[empty] == 0).all()
    lerr = np.abs(lse[~empty] - want_lse[~empty])
    assert (lerr <= 1e-5 * (1 + np.abs(want_lse[~empty]))).all(), f"lse off by {lerr.max()}"


def make_indices(rng, t_count, top_k, num_slots, empty_token=True):
    """Distinct slots per token, about a tenth -1, one token with none when asked."""
    idx = np.stack([rng.permutation(num_slots)[:top_k] if top_k <= num_slots
                    else rng.integers(0, num_slots, top_k) for _ in range(t_count)])
    idx = idx.astype(np.int32)
    idx[rng.random(idx.shape) < 0.1] = -1
    if empty_token and t_count > 1:
        idx[t_count // 2] = -1
    return idx


# (T, H, d_v, d_rope, top_k, num_slots): decode (T = 1) and prefill, DeepSeek-V3.2's 512 + 64
# and smaller latents, top_k below / at / above 128 and not a multiple of anything.
SHAPES = [(1, 16, 512, 64, 2048, 3000), (3, 16, 512, 64, 128, 300), (5, 2, 128, 64, 7, 40),
          (4, 3, 256, 64, 129, 200), (2, 4, 128, 32, 1, 5), (6, 1, 384, 64, 200, 150)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_matches_float64(rng, shape, cache):
    t_count, h, d_v, d_rope, top_k, num_slots = shape
    q = bf16(rng, (t_count, h, d_v + d_rope))
    latent = bf16(rng, (num_slots, d_v + d_rope), 0.5)
    idx = make_indices(rng, t_count, top_k, num_slots)
    sm_scale = float((d_v + d_rope) ** -0.5)
    if cache == "bf16":
        kv64, kw = latent.astype(np.float64), {"kv": latent}
    else:
        rows, kv64 = fp8_rows(latent, d_v)
        kw = {"kv_fp8": rows}
    out = np.full((t_count, h, d_v), np.nan, np.float32).astype(BF16)
    lse = np.full((t_count, h), np.nan, np.float32)
    got, got_lse = quantkv.sparse_mla_attention(q, idx, sm_scale, d_v=d_v, out=out, lse=lse, **kw)
    assert got is out and got_lse is lse
    want, want_lse = reference(q, kv64, idx, sm_scale, d_v)
    check(out, lse, want, want_lse, kv64, d_v)
    # New outputs: the same bits; one thread and two give the same bits.
    new_out, new_lse = quantkv.sparse_mla_attention(q, idx, sm_scale, d_v=d_v, num_threads=1, **kw)
    assert new_out.dtype == BF16 and new_lse.dtype == np.float32
    assert np.array_equal(new_out.view(np.uint16), out.view(np.uint16))
    assert np.array_equal(new_lse.view(np.uint32), lse.view(np.uint32))
    two, _ = quantkv.sparse_mla_attention(q, idx, sm_scale, d_v=d_v, num_threads=2, **kw)
    assert np.array_equal(two.view(np.uint16), out.view(np.uint16))


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_every_isa_gives_the_scalar_bits(rng, cache):
    """Each ISA level the machine runs gives the scalar level's bits (poisoned outputs)."""
    t_count, h, d_v, d_rope, top_k, num_slots = 7, 20, 512, 64, 77, 300
    q = bf16(rng, (t_count, h, d_v + d_rope))
    latent = bf16(rng, (num_slots, d_v + d_rope))
    idx = make_indices(rng, t_count, top_k, num_slots)
    kw = {"kv": latent} if cache == "bf16" else {"kv_fp8": fp8_rows(latent, d_v)[0]}
    before = quantkv.isa_level()
    levels = ["scalar", "avx2", "avx512"] if quantkv.max_supported_isa() == "avx512" else \
        sorted({"scalar", quantkv.max_supported_isa()})
    results = {}
    try:
        for isa in levels:
            quantkv.set_isa_level(isa)
            out = np.full((t_count, h, d_v), np.nan, np.float32).astype(BF16)
            lse = np.full((t_count, h), np.nan, np.float32)
            quantkv.sparse_mla_attention(q, idx, 0.06, d_v=d_v, out=out, lse=lse, **kw)
            results[isa] = (out.view(np.uint16).copy(), lse.view(np.uint32).copy())
    finally:
        quantkv.set_isa_level(before)
    for isa in levels:
        assert np.array_equal(results[isa][0], results["scalar"][0]), isa
        assert np.array_equal(results[isa][1], results["scalar"][1]), isa


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_topk_length_and_minus_one(rng, cache):
    t_count, h, d_v, d_rope, top_k, num_slots = 6, 16, 512, 64, 40, 64
    q = bf16(rng, (t_count, h, d_v + d_rope))
    latent = bf16(rng, (num_slots, d_v + d_rope))
    idx = make_indices(rng, t_count, top_k, num_slots, empty_token=False)
    length = rng.integers(0, top_k + 1, t_count).astype(np.int32)
    length[0], length[1] = 0, top_k
    sm_scale = 0.1
    kv64, kw = latent.astype(np.float64), {"kv": latent}
    if cache == "fp8":
        rows, kv64 = fp8_rows(latent, d_v)
        kw = {"kv_fp8": rows}
    out, lse = quantkv.sparse_mla_attention(q, idx, sm_scale, d_v=d_v, topk_length=length, **kw)
    want, want_lse = reference(q, kv64, idx, sm_scale, d_v, length)
    check(out, lse, want, want_lse, kv64, d_v)
    assert np.isneginf(lse[0]).all() and (np.asarray(out[0]).astype(np.float32) == 0).all()
    # Slots past topk_length are not read: garbage there changes nothing.
    junk = idx.copy()
    for t in range(t_count):
        junk[t, length[t]:] = -1 if t % 2 else rng.integers(0, num_slots)
    out2, lse2 = quantkv.sparse_mla_attention(q, junk, sm_scale, d_v=d_v, topk_length=length, **kw)
    assert np.array_equal(out2.view(np.uint16), out.view(np.uint16))
    assert np.array_equal(lse2, lse)
    # Every slot -1: out 0, lse -inf everywhere.
    none = np.full_like(idx, -1)
    out3, lse3 = quantkv.sparse_mla_attention(q, none, sm_scale, d_v=d_v, **kw)
    assert (out3.view(np.uint16) == 0).all() and np.isneginf(lse3).all()


def test_empty_and_torch(rng):
    torch = pytest.importorskip("torch")
    d_v, d_rope, num_slots = 512, 64, 50
    latent = bf16(rng, (num_slots, d_v + d_rope))
    # No tokens: empty results, nothing read.
    out, lse = quantkv.sparse_mla_attention(np.zeros((0, 16, 576), BF16),
                                            np.zeros((0, 8), np.int32), 0.1, kv=latent)
    assert out.shape == (0, 16, 512) and lse.shape == (0, 16)
    # torch in, torch out; the fp8 cache as a uint8 tensor.
    q = torch.from_numpy(bf16(rng, (3, 16, 576)).view(np.uint16)).view(torch.bfloat16)
    idx = torch.from_numpy(make_indices(rng, 3, 20, num_slots))
    rows, kv64 = fp8_rows(latent, d_v)
    out, lse = quantkv.sparse_mla_attention(q, idx, 0.05, kv_fp8=torch.from_numpy(rows))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32
    want, want_lse = reference(q.float().numpy(), kv64, idx.numpy(), 0.05, d_v)
    check(out.float().numpy(), lse.numpy(), want, want_lse, kv64, d_v)


def test_torch_op_eager_compiled_opcheck(rng):
    torch = pytest.importorskip("torch")
    import quantkv.torch  # noqa: F401  (registers torch.ops.quantkv)

    d_v, d_rope, pages, page_size = 512, 64, 4, 16
    latent = bf16(rng, (pages * page_size, d_v + d_rope))
    rows, _ = fp8_rows(latent, d_v)
    kv = torch.from_numpy(latent.view(np.uint16)).view(torch.bfloat16).reshape(pages, page_size, -1)
    kv8 = torch.from_numpy(rows).reshape(pages, page_size, -1)  # the engines' paged cache
    q = torch.from_numpy(bf16(rng, (4, 16, 576)).view(np.uint16)).view(torch.bfloat16)
    idx = torch.from_numpy(make_indices(rng, 4, 24, pages * page_size))
    length = torch.tensor([24, 0, 5, 13], dtype=torch.int32)
    for cache, flat in [(kv, {"kv": latent}), (kv8, {"kv_fp8": rows})]:
        out, lse = torch.ops.quantkv.sparse_mla(q, cache, idx, 0.07, 512, length)
        want, want_lse = quantkv.sparse_mla_attention(q.view(torch.uint16).numpy().view(BF16),
                                                      idx.numpy(), 0.07, topk_length=length.numpy(),
                                                      **flat)
        assert np.array_equal(out.view(torch.uint16).numpy(), want.view(np.uint16))
        assert np.array_equal(lse.numpy(), want_lse)

        def step(q, cache, idx, length):
            o, s = torch.ops.quantkv.sparse_mla(q, cache, idx, 0.07, 512, length)
            return o.float() * 2, s

        compiled = torch.compile(step, fullgraph=True)
        got = compiled(q, cache, idx, length)
        torch.testing.assert_close(got[0], out.float() * 2, rtol=0, atol=0)
        torch.testing.assert_close(got[1], lse, rtol=0, atol=0)
        torch.library.opcheck(torch.ops.quantkv.sparse_mla, (q, cache, idx, 0.07, 512, length),
                              test_utils=("test_faketensor",))
    with pytest.raises(ValueError, match="kv: expected bfloat16"):
        torch.ops.quantkv.sparse_mla(q, kv.float(), idx, 0.07, 512)


def test_errors_name_the_argument(rng):
    latent = bf16(rng, (10, 576))
    rows, _ = fp8_rows(latent, 512)
    q = bf16(rng, (2, 4, 576))
    idx = np.zeros((2, 3), np.int32)
    call = quantkv.sparse_mla_attention
    with pytest.raises(ValueError, match="q: expected dtype"):
        call(q.astype(np.float32), idx, 0.1, kv=latent)
    with pytest.raises(ValueError, match="indices: expected dtype int32"):
        call(q, idx.astype(np.int64), 0.1, kv=latent)
    with pytest.raises(ValueError, match="kv"):
        call(q, idx, 0.1)
    with pytest.raises(ValueError, match="kv"):
        call(q, idx, 0.1, kv=latent, kv_fp8=rows)
    with pytest.raises(ValueError, match="kv_fp8"):
        call(q, idx, 0.1, kv_fp8=rows[:, :600])
    with pytest.raises(ValueError, match="kv"):
        call(q, idx, 0.1, kv=latent[:, :500])
    with pytest.raises(ValueError, match="indices"):
        call(q, np.full((2, 3), 10, np.int32), 0.1, kv=latent)
    with pytest.raises(ValueError, match="indices"):
        call(q, np.full((2, 3), -2, np.int32), 0.1, kv=latent)
    with pytest.raises(ValueError, match="indices"):
        call(q, np.zeros((3, 3), np.int32), 0.1, kv=latent)
    with pytest.raises(ValueError, match="topk_length"):
        call(q, idx, 0.1, kv=latent, topk_length=np.array([4, 0], np.int32))
    with pytest.raises(ValueError, match="sm_scale"):
        call(q, idx, float("nan"), kv=latent)
    with pytest.raises(ValueError, match="d_v"):
        call(q, idx, 0.1, kv=latent, d_v=0)
    with pytest.raises(ValueError, match="out"):
        call(q, idx, 0.1, kv=latent, out=np.zeros((2, 4, 512), np.float32))
    with pytest.raises(ValueError, match="lse"):
        call(q, idx, 0.1, kv=latent, lse=np.zeros((2, 5), np.float32))
    # A failed call writes nothing.
    out = np.full((2, 4, 512), 7, np.float32).astype(BF16)
    with pytest.raises(ValueError, match="indices"):
        call(q, np.full((2, 3), 10, np.int32), 0.1, kv=latent, out=out)
    assert (out.astype(np.float32) == 7).all()
