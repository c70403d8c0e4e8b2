"""PagedKVCache: numpy views of its storage, page assignment and cache lengths, and the
read/write helpers checked against addressing the storage by hand (numpy_reference)."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv


def make_cache(dtype="bfloat16", **kw):
    args = dict(dtype=dtype, kv_dim=2, num_layers=2, page_size=4, num_heads=3, head_size=8,
                batch_size=3, max_pages_per_seq=4, seed=5)
    args.update(kw)
    return quantkv.PagedKVCache(16, **args)


def test_views_and_pages():
    c = make_cache()
    assert c.blocks.shape == (16, 2, 2, 4, 3, 8) and c.blocks.dtype == np.uint16
    assert c.scales is None and c.free_pages == 16
    assert np.all(c.lookup_table == 16)  # the sentinel
    c.reserve(0, 10)
    c.reserve(2, 1)
    assert c.pages_used(0) == 3 and c.pages_used(1) == 0 and c.pages_used(2) == 1
    assert c.free_pages == 12
    pages = c.lookup_table[0, :3]
    assert len(set(pages.tolist())) == 3 and np.all(pages < 16)
    c.set_cache_length(0, 9)
    assert c.cache_length(0) == 9 and c.cache_lengths.tolist() == [9, 0, 0]
    with pytest.raises(ValueError):
        c.cache_lengths[0] = 3  # read-only: lengths change through set_cache_length
    with pytest.raises(ValueError, match="length: 13 exceeds the 12 reserved positions of sequence 0"):
        c.set_cache_length(0, 13)
    with pytest.raises(MemoryError, match="more pages needed"):
        quantkv.PagedKVCache(2, page_size=4, max_pages_per_seq=4).reserve(0, 16)
    # The views share memory with the cache and keep it alive.
    blocks = make_cache().blocks
    blocks[...] = 7
    assert np.all(blocks == 7)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float8_e4m3fn"])
def test_write_read_follow_the_lookup_table(dtype, rng):
    c = make_cache(dtype)
    c.reserve(1, 11)
    values = rng.normal(size=(7, 3, 8)).astype(np.float32) * 4
    c.write(1, values, kv=1, layer=1, start=3)
    got = c.read(1, kv=1, layer=1, start=3, stop=10)
    raw, _ = ref.cache_rows(c, 1, np.arange(3, 10), kv=1, layer=1)
    decoded = {"float32": lambda r: r, "float16": lambda r: r.astype(np.float32),
               "bfloat16": ref.decode_bf16, "float8_e4m3fn": ref.decode_e4m3}[dtype](raw)
    np.testing.assert_array_equal(got, decoded)
    np.testing.assert_array_equal(c.read_raw(1, kv=1, layer=1, start=3, stop=10), raw)
    expected = {"float32": values, "float16": values.astype(np.float16).astype(np.float32),
                "bfloat16": ref.decode_bf16(ref.encode_bf16(values)),
                "float8_e4m3fn": ref.decode_e4m3(ref.encode_e4m3(values))}[dtype]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(c.read_v(1, layer=1, start=3, stop=10), got)
    # Other positions, layers and K are untouched.
    assert not np.any(c.read_k(1, layer=1)) and not np.any(c.read(1, kv=1, layer=0))
    c.write_raw(1, raw, kv=0, layer=0, start=0)
    np.testing.assert_array_equal(c.read_raw(1, start=0, stop=7), raw)


def test_scales():
    c = quantkv.PagedKVCache(8, dtype="float8_e4m3fn", kv_dim=1, page_size=2, num_heads=1,
                             head_size=64, scale_granularity=64, batch_size=1, max_pages_per_seq=4)
    assert c.scales.shape == (8, 1, 1, 2, 1, 1)
    c.reserve(0, 5)
    s = np.arange(1, 6, dtype=np.float32).reshape(5, 1, 1)
    c.write_scales(0, s)
    np.testing.assert_array_equal(c.read_scales(0, stop=5), s)
    np.testing.assert_array_equal(ref.cache_scale_rows(c, 0, np.arange(5)), s)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype: expected"):
        quantkv.PagedKVCache(4, dtype="int8")
    with pytest.raises(ValueError, match="config.num_blocks: expected >= 1, got 0"):
        quantkv.PagedKVCache(0)
    # Sizes whose product overflows int64 are errors, not a tiny allocation (issue 15).
    with pytest.raises(ValueError, match=r"do not fit in 2\^63-1 bytes"):
        quantkv.PagedKVCache(2**32 - 1, head_size=2**40)
    # 2^58 bytes fit in int64 but in no x86-64 address space: out of memory, not a crash.
    with pytest.raises(MemoryError, match="config: cannot allocate the cache"):
        quantkv.PagedKVCache(2**20, dtype="float8_e4m3fn", kv_dim=1, page_size=2**19, head_size=2**19)
    with pytest.raises(ValueError, match="num_positions: 9223372036854775807 needs"):
        make_cache().reserve(0, 2**63 - 1)
    c = make_cache()
    c.reserve(0, 4)
    with pytest.raises(ValueError, match=r"positions: expected 0 <= start <= stop <= 4"):
        c.read(0, stop=5)
    with pytest.raises(ValueError, match=r"kv: expected 0 <= kv < 2, got 2"):
        c.read(0, kv=2)
    with pytest.raises(ValueError, match=r"values: expected shape \[n, 3, 8\], got shape \[2, 8\]"):
        c.write(0, np.zeros((2, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="values: expected dtype uint16, got float32"):
        c.write_raw(0, np.zeros((1, 3, 8), dtype=np.float32))
    with pytest.raises(ValueError, match=r"b: expected 0 <= b < 3, got 3"):
        c.cache_length(3)
    with pytest.raises(ValueError, match="no scales"):
        c.read_scales(0)
