"""The indexer and its companions against the numpy reference: exact mode (integer inputs,
power-of-two scales: every score is exact in fp32, so the output must equal the reference's
ordering exactly, ties included) and random mode (contract §3's ε rule), on every ISA level."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv

ISAS = sorted({"scalar", quantkv.max_supported_isa()} | ({"avx2"} if quantkv.max_supported_isa() == "avx512" else set()))


def k_cache(cache_lens, seq_lens, d, page_size=4, num_layers=2, seed=1):
    b = len(cache_lens)
    need = [c + s for c, s in zip(cache_lens, seq_lens)]
    pages = max(1, max(-(-n // page_size) for n in need))
    cache = quantkv.PagedKVCache(b * pages + 3, dtype="float8_e4m3fn", kv_dim=1,
                                 num_layers=num_layers, page_size=page_size, num_heads=1,
                                 head_size=d, scale_granularity=d, batch_size=b,
                                 max_pages_per_seq=pages + 1, seed=seed)
    for i, (c, n) in enumerate(zip(cache_lens, need)):
        cache.reserve(i, n)
        cache.set_cache_length(i, c)
    return cache, np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.uint32)


def fill_exact_keys(rng, cache, layer, d):
    """Small-integer keys and power-of-two scales for every reserved position."""
    for b in range(cache.batch_size):
        n = cache.pages_used(b) * cache.page_size
        vals = rng.integers(-4, 5, size=(n, 1, d)).astype(np.float32)
        cache.write_raw(b, ref.encode_e4m3(vals), layer=layer)
        cache.write_scales(b, np.exp2(rng.integers(-2, 3, size=(n, 1, 1))).astype(np.float32), layer=layer)


def reference_indices(q, q_s, offs, cache, layer, causal, top_k):
    return np.stack([ref.topk_positions(s, top_k)
                     for s, _ in ref.indexer_scores(q, q_s, offs, cache, layer, causal)]) \
        if offs[-1] else np.zeros((0, top_k), dtype=np.int32)


@pytest.mark.parametrize("mask", ["causal", "null"])
def test_exact_mode_equals_reference(mask, rng):
    h, d, layer = 4, 32, 1
    cache_lens, seq_lens = [5, 0, 20, 3], [3, 0, 17, 1]   # an empty sequence, partial pages
    cache, offs = k_cache(cache_lens, seq_lens, d)
    fill_exact_keys(rng, cache, layer, d)
    t = int(offs[-1])
    q = ref.encode_e4m3(rng.integers(-3, 4, size=(t, h, d)).astype(np.float32))
    q_s = rng.integers(-2, 4, size=(t, h)).astype(np.float32)  # negative weights too
    for top_k in (1, 6, 64):
        expected = reference_indices(q, q_s, offs, cache, layer, mask == "causal", top_k)
        for isa in ISAS:
            quantkv.set_isa_level(isa)
            got = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, top_k, layer, mask)
            np.testing.assert_array_equal(got, expected, err_msg=f"top_k {top_k}, {isa}, {mask}")
    quantkv.set_isa_level(quantkv.max_supported_isa())


def test_companions_match_reference(rng):
    t, h, d = 9, 4, 64
    q = rng.normal(size=(t, h, d)).astype(np.float32) * 3
    w = rng.normal(size=(t, h)).astype(np.float32)
    for mode, pow2 in (("power_of_two", True), ("float", False)):
        q8, q_s = quantkv.indexer_q_prepare(q, w, mode)
        r8, rs = ref.indexer_q_prepare(q, w, pow2)
        np.testing.assert_allclose(q_s, rs, rtol=1e-6)
        assert_codes_close(q8, r8, exact=pow2)

    k = (rng.normal(size=(t, d)) * np.exp2(rng.integers(-4, 4, size=(t, 1)))).astype(np.float32)
    for mode, pow2 in (("power_of_two", True), ("float", False)):
        cache, offs = k_cache([2, 0, 7], [3, 0, 6], d)
        quantkv.indexer_k_store(k, offs, cache, 1, mode)
        codes, scales = ref.indexer_k_store(k, pow2)
        for b in range(3):
            start, end, c = int(offs[b]), int(offs[b + 1]), cache.cache_length(b)
            assert_codes_close(cache.read_raw(b, layer=1, start=c, stop=c + end - start)[:, 0],
                               codes[start:end], exact=pow2)
            got_s = cache.read_scales(b, layer=1, start=c, stop=c + end - start)[:, 0, 0]
            np.testing.assert_allclose(got_s, scales[start:end], rtol=0 if pow2 else 2e-7)
            assert not np.any(cache.read_raw(b, layer=1, stop=c)), "cached positions overwritten"
            assert not np.any(cache.read_raw(b, layer=0)), "another layer written"
        # bf16 input (uint16 bits) stores its decoded values.
        kb = ref.encode_bf16(k)
        quantkv.indexer_k_store(kb, offs, cache, 0, mode)
        codes_b, _ = ref.indexer_k_store(ref.decode_bf16(kb), pow2)
        assert_codes_close(cache.read_raw(2, layer=0, start=7, stop=13)[:, 0], codes_b[3:9], exact=pow2)


def assert_codes_close(got, expected, exact):
    """Exact, or (float scales: s = amax/448 is divided or multiplied by its reciprocal, 1 ulp
    apart as the contract notes) at most one e4m3 step apart on a few elements."""
    if exact or got.size == 0:
        np.testing.assert_array_equal(got, expected)
        return
    diff = np.abs(ref.decode_e4m3(got) - ref.decode_e4m3(expected))
    step = np.abs(ref.decode_e4m3(expected)) * 2.0**-3 + 2.0**-9
    assert np.all(diff <= step) and np.mean(diff > 0) < 0.01


def test_random_pipeline_within_eps(rng):
    """q_prepare + k_store + indexer on random data, checked against float64 scores of what
    the cache holds, with contract §3's ε rule."""
    h, d, layer = 8, 128, 0
    cache_lens, seq_lens = [40, 0, 3], [9, 5, 30]
    cache, offs = k_cache(cache_lens, seq_lens, d, page_size=16, num_layers=1)
    t = int(offs[-1])
    for b, c in enumerate(cache_lens):  # the history: stored as sequence b's only rows
        cache.set_cache_length(b, 0)
        rows = np.zeros(len(cache_lens) + 1, dtype=np.uint32)
        rows[b + 1:] = c
        quantkv.indexer_k_store(rng.normal(size=(c, d)).astype(np.float32), rows, cache, layer)
        cache.set_cache_length(b, c)
    quantkv.indexer_k_store(rng.normal(size=(t, d)).astype(np.float32), offs, cache, layer)
    q8, q_s = quantkv.indexer_q_prepare(rng.normal(size=(t, h, d)).astype(np.float32),
                                        rng.normal(size=(t, h)).astype(np.float32))
    top_k = 16
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        for mask in ("causal", "null"):
            got = quantkv.mla_indexer_ragged_float8_paged(q8, q_s, offs, cache, top_k, layer, mask,
                                                          num_threads=2)
            for row, (scores, eps) in enumerate(ref.indexer_scores(q8, q_s, offs, cache, layer,
                                                                   mask == "causal")):
                problems = ref.check_topk_within_eps(got[row], scores, eps, top_k)
                assert not problems, f"row {row}, {isa}, {mask}: {problems}"
            # Deterministic whatever the threads or the workspace budget (chunking).
            for kw in ({"num_threads": 1}, {"num_threads": 3}, {"scores_budget_bytes": 4 << 20}):
                again = quantkv.mla_indexer_ragged_float8_paged(q8, q_s, offs, cache, top_k, layer,
                                                                mask, **kw)
                np.testing.assert_array_equal(again, got, err_msg=f"{kw}, {isa}, {mask}")
    quantkv.set_isa_level(quantkv.max_supported_isa())
    with pytest.raises(MemoryError, match="scores_budget_bytes"):  # a budget no plan can meet
        quantkv.mla_indexer_ragged_float8_paged(q8, q_s, offs, cache, top_k, layer,
                                                scores_budget_bytes=1)


def test_bad_input_and_dlpack(rng):
    d = 32
    cache, offs = k_cache([0], [4], d)
    fill_exact_keys(rng, cache, 0, d)
    q = ref.encode_e4m3(rng.integers(-3, 4, size=(4, 2, d)).astype(np.float32))
    q_s = np.ones((4, 2), dtype=np.float32)

    class DLPackOnly:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    expected = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 3)
    got = quantkv.mla_indexer_ragged_float8_paged(DLPackOnly(q), DLPackOnly(q_s), offs, cache, 3)
    np.testing.assert_array_equal(got, expected)
    out = np.full((4, 3), 99, dtype=np.int32)
    assert quantkv.mla_indexer_ragged_float8_paged(q, q_s, [0, 4], cache, 3, out=out) is out
    np.testing.assert_array_equal(out, expected)

    with pytest.raises(ValueError, match=r"q: expected dtype uint8 \(float8_e4m3fn bits\) or float8_e4m3fn, got float32"):
        quantkv.mla_indexer_ragged_float8_paged(q.astype(np.float32), q_s, offs, cache, 3)
    with pytest.raises(ValueError, match="input_row_offsets"):
        quantkv.mla_indexer_ragged_float8_paged(q, q_s, [0, 3], cache, 3)
    with pytest.raises(ValueError, match="top_k"):
        quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 0)
    with pytest.raises(ValueError, match="mask"):
        quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 3, mask="sliding")
    with pytest.raises(ValueError, match="q_s"):
        quantkv.mla_indexer_ragged_float8_paged(q, q_s[:3], offs, cache, 3)
    read_only = np.zeros((4, 3), np.int32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, 3, out=read_only)


@pytest.mark.parametrize("next_n", range(1, 9))
def test_mtp_decode_follows_the_deepgemm_convention(next_n, rng):
    """MTP decode (docs/indexer.md, "MTP"): next_n rows per sequence, row i of a sequence of
    context length L sees the keys [0, L - next_n + i + 1). The cache is DeepGEMM's buffer
    uint8 [num_blocks, page, 1, D + 4] with a shuffled int32 block table; the reference works
    from L and next_n directly, in float64 on small integers (exact, ties included); the call
    uses the documented mapping: offsets b * next_n, cache lengths L - next_n."""
    h, d, page, top_k = 4, 32, 16, 24
    lens = [next_n, next_n + 5, 40, 70]                    # L == next_n; partial pages
    b = len(lens)
    need = [-(-n // page) for n in lens]
    nb = sum(need) + 2
    ids = rng.permutation(nb).astype(np.int32)
    table = np.full((b, max(need) + 1), -1, np.int32)
    start = 0
    for s, n in enumerate(need):
        table[s, :n] = ids[start:start + n]
        start += n
    keys = rng.integers(-4, 5, size=(nb, page, d)).astype(np.float32)
    scales = np.exp2(rng.integers(-1, 2, size=(nb, page))).astype(np.float32)
    kv = np.zeros((nb, page, 1, d + 4), np.uint8)
    flat = kv.reshape(nb, page * (d + 4))
    flat[:, :page * d] = ref.encode_e4m3(keys).reshape(nb, page * d)
    flat[:, page * d:] = scales.view(np.uint8).reshape(nb, page * 4)
    t = b * next_n
    q_vals = rng.integers(-3, 4, size=(t, h, d)).astype(np.float32)
    q = ref.encode_e4m3(q_vals)
    w = rng.integers(-2, 4, size=(t, h)).astype(np.float32)

    expected = np.empty((t, top_k), np.int32)
    for s, L in enumerate(lens):
        pos = np.arange(L)
        k_rows = keys[table[s, pos // page], pos % page].astype(np.float64)      # [L, D]
        k_scale = scales[table[s, pos // page], pos % page].astype(np.float64)  # [L]
        for i in range(next_n):
            r = s * next_n + i
            visible = L - next_n + i + 1
            dots = np.maximum(q_vals[r].astype(np.float64) @ k_rows[:visible].T, 0)  # [H, visible]
            expected[r] = ref.topk_positions((w[r].astype(np.float64) @ dots) * k_scale[:visible], top_k)

    offs = np.arange(b + 1, dtype=np.int32) * next_n
    cache_lengths = np.asarray(lens, np.int32) - next_n
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        for threads in (1, 2):
            got = quantkv.mla_indexer_ragged_float8_paged_engine(q, w, offs, kv, table, cache_lengths, top_k,
                                                                 num_threads=threads)
            np.testing.assert_array_equal(got, expected, err_msg=f"next_n {next_n}, {isa}, {threads} threads")
    quantkv.set_isa_level(quantkv.max_supported_isa())
    # Global slots (what sparse attention gathers by): the same positions through the table.
    slots = quantkv.mla_indexer_ragged_float8_paged_engine(q, w, offs, kv, table, cache_lengths, top_k,
                                                           index_output="global_slots")
    seq = np.repeat(np.arange(b), next_n)[:, None]
    want = np.where(expected >= 0, table[seq, np.maximum(expected, 0) // page] * page + expected % page, -1)
    np.testing.assert_array_equal(slots, want)
