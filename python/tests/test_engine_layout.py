"""The indexer K cache in the engines' layout (vLLM / SGLang / DeepGEMM), global slots and
int32 block tables: the engine buffer is built here with numpy exactly as DeepGEMM's test
builds it (a page's fp8 key rows, then its float32 scales), from a PagedKVCache holding the
same keys; the indexer must return the same indices over both, and the K store must write the
same bytes into both."""
import numpy as np
import pytest

import quantkv

ISAS = sorted({"scalar", quantkv.max_supported_isa()} | ({"avx2"} if quantkv.max_supported_isa() == "avx512" else set()))


def make_cache(rng, cache_lens, seq_lens, d, page_size, layer=1):
    b = len(cache_lens)
    need = [c + s for c, s in zip(cache_lens, seq_lens)]
    pages = max(1, max(-(-n // page_size) for n in need))
    cache = quantkv.PagedKVCache(b * pages + 3, dtype="float8_e4m3fn", kv_dim=1, num_layers=2,
                                 page_size=page_size, num_heads=1, head_size=d, scale_granularity=d,
                                 batch_size=b, max_pages_per_seq=pages + 1, seed=int(rng.integers(1 << 30)))
    for i, (c, n) in enumerate(zip(cache_lens, need)):
        cache.reserve(i, n)
        cache.set_cache_length(i, c)
    codes = rng.integers(0, 256, size=cache.blocks.shape, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes
    cache.blocks[...] = codes
    cache.scales[...] = rng.uniform(0.01, 2.0, size=cache.scales.shape).astype(np.float32)
    offs = np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)
    return cache, offs, layer


def engine_buffer(cache, layer, pad=0):
    """uint8 [num_blocks, page_size * (D + 4) + pad]: keys of the page, then its scales."""
    nb, p, d = cache.num_blocks, cache.page_size, cache.head_size
    keys = cache.blocks[:, 0, layer, :, 0, :].reshape(nb, p * d)
    scales = np.ascontiguousarray(cache.scales[:, 0, layer, :, 0, 0]).view(np.uint8).reshape(nb, p * 4)
    return np.concatenate([keys, scales, np.full((nb, pad), 0xEE, np.uint8)], axis=1)


def int32_table(cache):
    t = cache.lookup_table.astype(np.int64)
    t[t >= cache.num_blocks] = -1  # the engines' empty entry
    return t.astype(np.int32)


def random_q(rng, t, h, d):
    q = rng.integers(0, 256, size=(t, h, d), dtype=np.uint8)
    q[(q & 0x7F) == 0x7F] = 0
    return q, rng.normal(0.2, 1.0, size=(t, h)).astype(np.float32)


def global_slots(positions, offs, table, page_size):
    out = positions.copy()
    for b in range(len(offs) - 1):
        rows = out[offs[b]:offs[b + 1]]
        sel = rows >= 0
        rows[sel] = table[b, rows[sel] // page_size].astype(np.int64) * page_size + rows[sel] % page_size
    return out


@pytest.mark.parametrize("mask", ["causal", "null"])
def test_indexer_same_indices_in_both_layouts(mask, rng):
    h, d, p, top_k = 4, 64, 16, 20
    cache, offs, layer = make_cache(rng, [40, 0, 17], [3, 20, 1], d, p)
    q, q_s = random_q(rng, int(offs[-1]), h, d)
    buf = engine_buffer(cache, layer)
    table = int32_table(cache)
    want = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, top_k, layer, mask)
    want_slots = quantkv.mla_indexer_ragged_float8_paged(q, q_s, offs, cache, top_k, layer, mask,
                                                         index_output="global_slots")
    np.testing.assert_array_equal(want_slots, global_slots(want, offs, cache.lookup_table, p))
    for isa in ISAS:
        quantkv.set_isa_level(isa)
        for kv in (buf, buf.reshape(cache.num_blocks, p, 1, d + 4), buf.reshape(cache.num_blocks, p, d + 4)):
            got = quantkv.mla_indexer_ragged_float8_paged_engine(q, q_s, offs, kv, table, cache.cache_lengths, top_k,
                                                                 mask=mask, page_size=p)
            np.testing.assert_array_equal(got, want, err_msg=f"{isa}, shape {kv.shape}")
        got = quantkv.mla_indexer_ragged_float8_paged_engine(q, q_s, offs, buf, table, cache.cache_lengths, top_k,
                                                             mask=mask, page_size=p, index_output="global_slots")
        np.testing.assert_array_equal(got, want_slots, err_msg=isa)
    quantkv.set_isa_level(quantkv.max_supported_isa())


def test_indexer_returns_the_callers_framework(rng):
    torch = pytest.importorskip("torch")
    h, d, p, top_k = 4, 64, 16, 8
    cache, offs, layer = make_cache(rng, [9], [3], d, p)
    q, q_s = random_q(rng, int(offs[-1]), h, d)
    buf = engine_buffer(cache, layer)
    table = int32_table(cache)
    want = quantkv.mla_indexer_ragged_float8_paged_engine(q, q_s, offs, buf, table, cache.cache_lengths,
                                                          top_k, page_size=p)
    got = quantkv.mla_indexer_ragged_float8_paged_engine(
        torch.from_numpy(np.asarray(q).view(np.uint8)), torch.from_numpy(q_s), torch.from_numpy(offs),
        torch.from_numpy(buf), torch.from_numpy(table), torch.from_numpy(cache.cache_lengths), top_k,
        page_size=p)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
def test_k_store_writes_what_it_writes_into_a_paged_cache(dtype, rng):
    d, p = 32, 4
    cache, offs, layer = make_cache(rng, [3, 0, 9], [5, 2, 1], d, p)
    padded = engine_buffer(cache, layer, pad=8)       # pages padded: the outer stride is larger
    buf = padded[:, :p * (d + 4)]
    k = rng.normal(0, 3, size=(int(offs[-1]), d)).astype(np.float32)
    if dtype == "bf16":
        k = quantkv.encode_bf16(k)
    quantkv.indexer_k_store(k, offs, cache, layer, "power_of_two")
    quantkv.indexer_k_store_engine(k, offs, buf, int32_table(cache), cache.cache_lengths, page_size=p)
    np.testing.assert_array_equal(padded, engine_buffer(cache, layer, pad=8))


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
@pytest.mark.parametrize("positions", [False, True])
def test_k_store_with_the_front_end_writes_the_same_bytes_in_both_layouts(dtype, positions, rng):
    """DeepSeek-V3.2's front end (RoPE on the leading 16 of D = 32, Walsh-Hadamard, bf16 steps)
    before the store: the engine buffer gets what the PagedKVCache gets (the front end itself is
    checked against numpy in test_rope.py)."""
    d, p = 32, 4
    cache, offs, layer = make_cache(rng, [3, 0, 9], [5, 2, 1], d, p)
    padded = engine_buffer(cache, layer, pad=8)
    buf = padded[:, :p * (d + 4)]
    before = padded.copy()
    k = rng.normal(0, 3, size=(int(offs[-1]), d)).astype(np.float32)
    if dtype == "bf16":
        k = quantkv.encode_bf16(k)
    freqs = quantkv.make_freqs_cis(16, 16)
    pos = None
    if positions:
        pos = np.concatenate([np.arange(c, c + s) for c, s in zip([3, 0, 9], [5, 2, 1])]).astype(np.int32)
    quantkv.indexer_k_store_front_end(k, offs, cache, layer, freqs_cis=freqs, position_ids=pos)
    quantkv.indexer_k_store_front_end(k, offs, buf, freqs_cis=freqs, position_ids=pos,
                                      block_table=int32_table(cache), cache_lengths=cache.cache_lengths,
                                      page_size=p)
    assert not np.array_equal(padded, before), "nothing stored"
    np.testing.assert_array_equal(padded, engine_buffer(cache, layer, pad=8))
    with pytest.raises(ValueError, match="block_table, cache_lengths: give both"):
        quantkv.indexer_k_store_front_end(k, offs, buf, block_table=int32_table(cache), page_size=p)


def test_bad_arguments_raise_value_error_naming_them(rng):
    d, p = 32, 4
    cache, offs, layer = make_cache(rng, [3], [2], d, p)
    q, q_s = random_q(rng, 2, 2, d)
    buf = engine_buffer(cache, layer)
    table = int32_table(cache)
    run = quantkv.mla_indexer_ragged_float8_paged_engine
    with pytest.raises(ValueError, match="kv_cache"):
        run(q, q_s, offs, buf.astype(np.float32), table, cache.cache_lengths, 4, page_size=p)
    with pytest.raises(ValueError, match="page_size: required"):
        run(q, q_s, offs, buf, table, cache.cache_lengths, 4)
    with pytest.raises(ValueError, match="index_output"):
        run(q, q_s, offs, buf, table, cache.cache_lengths, 4, page_size=p, index_output="slots")
    with pytest.raises(ValueError, match="k_cache.head_size"):
        run(q, q_s, offs, buf.reshape(cache.num_blocks, 2 * p, -1), table, cache.cache_lengths, 4)
    bad = table.copy()
    bad[0, 0] = -1  # a needed page missing
    with pytest.raises(ValueError, match="k_cache.lookup_table"):
        run(q, q_s, offs, buf, bad, cache.cache_lengths, 4, page_size=p)
    with pytest.raises(ValueError, match="positive page stride"):
        run(q, q_s, offs, np.broadcast_to(buf[:1], buf.shape), table, cache.cache_lengths, 4, page_size=p)
    with pytest.raises(ValueError, match="writable"):
        ro = buf.copy()
        ro.setflags(write=False)
        quantkv.indexer_k_store_engine(np.zeros((2, d), np.float32), offs, ro, table, cache.cache_lengths, page_size=p)
