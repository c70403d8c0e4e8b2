"""DeepSeek-V4's MXFP4 index-K cache through Python (k_format='mxfp4', docs/indexer.md "MXFP4 K
cache"): the K store must write the bytes of vLLM's insert (re-implemented here with numpy and
ml_dtypes' float4_e2m1fn), and the indexer over the cache must select the top-k of float64 scores
of the dequantised keys (up to near-ties), identically on every ISA path."""
import ml_dtypes
import numpy as np
import pytest

import quantkv

ISAS = sorted({"scalar", quantkv.max_supported_isa()} | ({"avx2"} if quantkv.max_supported_isa() == "avx512" else set()))


def vllm_insert(k):
    """float32 [T, D] -> (codes uint8 [T, D/2], ue8m0 uint8 [T, D/32]) as vLLM's DeepSeek-V4 insert:
    s = 2^ceil(log2(max(amax, 6 * 2^-126) * (1/6))), codes e2m1(x / s) to nearest, saturated."""
    t, d = k.shape
    blocks = k.reshape(t, d // 32, 32).astype(np.float32)
    amax = np.maximum(np.abs(blocks).max(axis=-1), np.float32(6.0 * 2.0**-126))
    ratio = amax * np.float32(1.0 / 6.0)  # one float32 product, as the kernel
    e = np.clip(np.ceil(np.log2(ratio.astype(np.float64))), -127, 127)
    scaled = np.clip(blocks.astype(np.float64) * np.exp2(-e)[..., None], -6.0, 6.0)
    nib = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(t, d) & 0xF
    codes = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return codes, (e + 127).astype(np.uint8).reshape(t, d // 32)


def dequantise(codes, sf):
    """uint8 [N, D/2], [N, D/32] -> float64 [N, D]."""
    n = codes.shape[0]
    nib = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(n, -1)
    vals = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    return vals * np.repeat(np.exp2(sf.astype(np.float64) - 127), 32, axis=1)


def make_step(rng, cache_lens, seq_lens, d=128, page=16, h=8):
    b = len(cache_lens)
    need = [-(-(c + s) // page) for c, s in zip(cache_lens, seq_lens)]
    nb = sum(need) + 2
    ids = rng.permutation(nb)
    table = np.full((b, max(need) + 1), -1, np.int32)
    at = 0
    for i, n in enumerate(need):
        table[i, :n] = ids[at:at + n]
        at += n
    width = d // 2 + d // 32
    kv = rng.integers(0, 256, size=(nb, page, width), dtype=np.uint8)
    return kv, table, np.array(cache_lens, np.int32), np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)


def slot_bytes(kv, page_id, slot, d):
    """The codes and scale bytes of one slot in a [nb, page, D/2 + D/32] buffer (a page is all
    its code rows, then all its scale rows)."""
    page = kv[page_id].reshape(-1)
    p = kv.shape[1]
    return page[slot * (d // 2):(slot + 1) * (d // 2)], page[p * (d // 2) + slot * (d // 32):p * (d // 2) + (slot + 1) * (d // 32)]


def test_k_store_writes_vllms_bytes():
    rng = np.random.default_rng()
    print("seed-free: numpy default_rng, entropy", rng.bit_generator.seed_seq.entropy)
    d = 128
    cache_lens, seq_lens = [5, 0, 40], [3, 17, 1]
    kv, table, lens, offs = make_step(rng, cache_lens, seq_lens, d=d)
    k = (rng.normal(size=(offs[-1], d)) * np.exp2(rng.integers(-8, 8, size=(offs[-1], 1)))).astype(np.float32)
    k[0, :32] = 6.0 * 0.25 * rng.integers(-24, 25, size=32)  # ties on the grid, amax 6
    k[1, 32:64] = 0.0
    before = kv.copy()
    quantkv.indexer_k_store_engine(k, offs, kv, table, lens, k_format="mxfp4")
    codes, sf = vllm_insert(k)
    touched = np.zeros(kv.shape[:2], bool)
    for bi in range(len(seq_lens)):
        for i in range(seq_lens[bi]):
            t, pos = offs[bi] + i, cache_lens[bi] + i
            page_id, slot = table[bi, pos // kv.shape[1]], pos % kv.shape[1]
            c, s = slot_bytes(kv, page_id, slot, d)
            np.testing.assert_array_equal(c, codes[t])
            np.testing.assert_array_equal(s, sf[t])
            touched[page_id, slot] = True
    for page_id in range(kv.shape[0]):
        for slot in range(kv.shape[1]):
            if not touched[page_id, slot]:
                c, s = slot_bytes(kv, page_id, slot, d)
                c0, s0 = slot_bytes(before, page_id, slot, d)
                np.testing.assert_array_equal(c, c0)
                np.testing.assert_array_equal(s, s0)


@pytest.mark.parametrize("mask", ["causal", "null"])
def test_indexer_selects_the_float64_top_k(mask):
    rng = np.random.default_rng()
    print("entropy", rng.bit_generator.seed_seq.entropy)
    d, h, top_k = 128, 8, 48
    cache_lens, seq_lens = [300, 0, 70], [2, 5, 1]
    kv, table, lens, offs = make_step(rng, cache_lens, seq_lens, d=d, h=h)
    # Realistic keys: stored through the K store (scale bytes near 127, no 0xFF).
    k_all = rng.normal(size=(sum(c + s for c, s in zip(cache_lens, seq_lens)), d)).astype(np.float32)
    quantkv.indexer_k_store_engine(k_all, np.concatenate([[0], np.cumsum([c + s for c, s in zip(cache_lens, seq_lens)])]),
                                   kv, table, np.zeros(3, np.int32), k_format="mxfp4")
    q = rng.integers(0, 256, size=(offs[-1], h, d), dtype=np.uint8)
    q[(q & 0x7F) == 0x7F] = 0
    q_s = rng.normal(0.2, 1.0, size=(offs[-1], h)).astype(np.float32)
    results = []
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        results.append(quantkv.mla_indexer_ragged_float8_paged_engine(
            q, q_s, offs, kv, table, lens, top_k, mask=mask, k_format="mxfp4"))
    quantkv.set_isa_level(quantkv.max_supported_isa())
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    got = results[0]
    qf = q.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    for bi in range(len(seq_lens)):
        n_keys = cache_lens[bi] + seq_lens[bi]
        pos = np.arange(n_keys)
        pages, slots = table[bi, pos // kv.shape[1]], pos % kv.shape[1]
        rows = [slot_bytes(kv, p, s, d) for p, s in zip(pages, slots)]
        keys = dequantise(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))
        for i in range(seq_lens[bi]):
            t = offs[bi] + i
            visible = cache_lens[bi] + i + 1 if mask == "causal" else n_keys
            score = (np.maximum(qf[t] @ keys[:visible].T, 0) * q_s[t][:, None]).sum(axis=0)
            n = min(top_k, visible)
            sel = got[t, :n]
            assert (got[t, n:] == -1).all()
            assert len(set(sel.tolist())) == n and sel.min() >= 0 and sel.max() < visible
            tol = 1e-4 * np.abs(score).max()
            threshold = np.sort(score)[::-1][n - 1]
            assert score[sel].min() >= threshold - tol
            rest = np.setdiff1d(np.arange(visible), sel)
            if rest.size:
                assert score[rest].max() <= threshold + tol
            # best first
            assert (np.diff(score[sel]) <= tol).all()


def test_mxfp4_geometry_errors_name_the_argument():
    kv = np.zeros((4, 16, 70), np.uint8)  # 70 is not a multiple of 17
    with pytest.raises(ValueError, match="kv_cache"):
        quantkv.indexer_k_store_engine(np.zeros((1, 128), np.float32), np.array([0, 1], np.int32), kv,
                                       np.zeros((1, 1), np.int32), np.zeros(1, np.int32), k_format="mxfp4")
    with pytest.raises(ValueError, match="k_format"):
        quantkv.indexer_k_store_engine(np.zeros((1, 128), np.float32), np.array([0, 1], np.int32), kv,
                                       np.zeros((1, 1), np.int32), np.zeros(1, np.int32), k_format="fp4")
    kv = np.zeros((4, 16, 68), np.uint8)
    with pytest.raises(Exception, match="scale_mode"):
        quantkv.indexer_k_store_engine(np.zeros((1, 128), np.float32), np.array([0, 1], np.int32), kv,
                                       np.zeros((1, 1), np.int32), np.zeros(1, np.int32), k_format="mxfp4",
                                       scale_mode="float")


def test_nvfp4_cache_selects_the_float64_top_k():
    """k_format='nvfp4' (D/2 e2m1 bytes, then D/16 e4m3 bytes per token, per-tensor k_global_scale):
    stored through the K store, scored identically on every ISA, and the top-k of float64 scores of
    the keys dequantised as code * e4m3(sf) / g (near-ties allowed)."""
    rng = np.random.default_rng()
    print("entropy", rng.bit_generator.seed_seq.entropy)
    d, h, top_k, page = 128, 8, 48, 16
    n_keys = 300
    k = rng.normal(size=(n_keys, d)).astype(np.float32)
    g = np.float32(448.0 * 6.0 / np.abs(k).max())
    nb = -(-n_keys // page) + 1
    table = rng.permutation(nb)[None, :].astype(np.int32)
    kv = np.zeros((nb, page, d // 2 + d // 16), np.uint8)
    quantkv.indexer_k_store_engine(k, np.array([0, n_keys], np.int32), kv, table, np.zeros(1, np.int32),
                                   k_format="nvfp4", k_global_scale=float(g))
    q = rng.integers(0, 256, size=(1, h, d), dtype=np.uint8)
    q[(q & 0x7F) == 0x7F] = 0
    q_s = rng.normal(0.2, 1.0, size=(1, h)).astype(np.float32)
    results = []
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        results.append(quantkv.mla_indexer_ragged_float8_paged_engine(
            q, q_s, np.array([0, 1], np.int32), kv, table, np.array([n_keys - 1], np.int32), top_k,
            k_format="nvfp4", k_global_scale=float(g)))
    quantkv.set_isa_level(quantkv.max_supported_isa())
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    keys = np.zeros((n_keys, d))
    for pos in range(n_keys):
        flat = kv[table[0, pos // page]].reshape(-1)
        slot = pos % page
        codes = flat[slot * (d // 2):(slot + 1) * (d // 2)]
        sf = flat[page * (d // 2) + slot * (d // 16):page * (d // 2) + (slot + 1) * (d // 16)]
        nib = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(-1)
        vals = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        keys[pos] = vals * np.repeat(sf.view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16) / float(g)
        assert np.abs(keys[pos] - k[pos]).max() <= 0.25 * np.abs(k[pos]).max() + 1e-6  # NVFP4's error
    qf = q.view(ml_dtypes.float8_e4m3fn).astype(np.float64)[0]
    score = (np.maximum(qf @ keys.T, 0) * q_s[0][:, None]).sum(axis=0)
    sel = results[0][0]
    tol = 1e-4 * np.abs(score).max()
    threshold = np.sort(score)[::-1][top_k - 1]
    assert len(set(sel.tolist())) == top_k and score[sel].min() >= threshold - tol
    rest = np.setdiff1d(np.arange(n_keys), sel)
    assert score[rest].max() <= threshold + tol
