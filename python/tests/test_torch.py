"""torch CPU tensors: results come back as torch tensors, outputs and engine-owned caches are
written in place (same data pointer, bytes checked against the numpy reference), and the
torch.library ops of quantkv.torch run eagerly and under torch.compile."""
import types

import numpy as np
import pytest

import numpy_reference as ref
import quantkv
from test_indexer import reference_indices
from test_qkv import HEAD, KV_HEADS, exact_operands, expected_blocks

torch = pytest.importorskip("torch")


def bits(t):
    """A torch tensor's bytes as a numpy array of the same shape (uint8 / uint16 / as is)."""
    if t.dtype.itemsize == 1 and t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def engine_cache(rng, dtype, cache_lens, seq_lens, kv_dim, head, num_heads, scales=False):
    """What an engine allocates: blocks, int32 block table (shuffled pages, unused entries
    past num_blocks), int32 lengths, optional scales — all torch tensors, poisoned."""
    page_size, b = 4, len(cache_lens)
    pages = [-(-(c + s) // page_size) for c, s in zip(cache_lens, seq_lens)]
    num_blocks = sum(pages) + 2
    max_pages = max(pages) + 1
    order = rng.permutation(num_blocks)
    table = np.full((b, max_pages), num_blocks + 7, np.int32)
    used = 0
    for i, n in enumerate(pages):
        table[i, :n] = order[used:used + n]
        used += n
    shape = (num_blocks, kv_dim, 1, page_size, num_heads, head)
    blocks = torch.from_numpy(rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize,
                                           dtype=np.uint8)).view(dtype).reshape(shape)
    if dtype.is_floating_point and dtype.itemsize > 1:  # no NaN poison in float caches
        blocks = torch.nan_to_num(blocks, nan=0.0).contiguous()
    tensors = types.SimpleNamespace(
        blocks=blocks, cache_lengths=torch.tensor(cache_lens, dtype=torch.int32),
        lookup_table=torch.from_numpy(table),
        scales=torch.full(shape[:5] + (1,), 3.0) if scales else None)
    return tensors, torch.tensor(np.concatenate([[0], np.cumsum(seq_lens)]), dtype=torch.int32)


def numpy_side(t, dtype_name):
    """The reference's view of an engine cache: numpy arrays of the same memory."""
    return types.SimpleNamespace(
        blocks=bits(t.blocks), scales=None if t.scales is None else t.scales.numpy(),
        lookup_table=t.lookup_table.numpy(), cache_lengths=t.cache_lengths.numpy(),
        cache_length=lambda b: int(t.cache_lengths[b]), page_size=t.blocks.shape[3],
        num_blocks=t.blocks.shape[0], kv_dim=t.blocks.shape[1], batch_size=len(t.cache_lengths),
        dtype=dtype_name)


def test_torch_in_torch_out(rng):
    x = torch.from_numpy(rng.normal(size=(5, 64)).astype(np.float32))
    data, scales = quantkv.quantize_dynamic_block_scaled(x, "nvfp4", 2.0)
    assert isinstance(data, torch.Tensor) and data.shape == (5, 32) and data.dtype.itemsize == 1
    want_d, want_s = quantkv.quantize_dynamic_block_scaled(x.numpy(), "nvfp4", 2.0)
    np.testing.assert_array_equal(bits(data), want_d)
    np.testing.assert_array_equal(bits(scales), want_s)
    assert scales.dtype == torch.float8_e4m3fn
    y = quantkv.decode_bf16(torch.from_numpy(ref.encode_bf16(x.numpy())).view(torch.bfloat16))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    with pytest.raises(ValueError, match=r"x: expected dtype float32, bfloat16 or uint16 \(bfloat16 bits\), got float16"):
        quantkv.quantize_dynamic_block_scaled(x.half())


def test_engine_cache_through_fused_qkv_and_indexer(rng):
    """The acceptance test: a bf16 KV cache and an fp8 indexer K cache owned by the 'engine'
    (torch tensors: blocks, int32 block table, int32 lengths, scales), passed through the
    fused QKV projection, the K store and the indexer; the bytes written into the engine's
    memory and the results equal the reference's."""
    fmt, k, q_dim, cache_lens, seq_lens = "nvfp4", 64, 24, [3, 6], [2, 5]
    kv, offs = engine_cache(rng, torch.bfloat16, cache_lens, seq_lens, 2, HEAD, KV_HEADS)
    view = quantkv.PagedCacheView(kv.blocks, kv.cache_lengths, kv.lookup_table)
    m, n = int(offs[-1]), q_dim + 2 * KV_HEADS * HEAD
    hs, hs_s, w, w_s = exact_operands(rng, fmt, m, n, k)
    c, _ = ref.fused_qkv(hs, hs_s, w, w_s, fmt, k, 0.5)
    reference = numpy_side(kv, "bfloat16")
    want = expected_blocks(reference, reference.blocks.copy(), c, offs.numpy(), q_dim, 0)
    address = kv.blocks.data_ptr()
    t_hs = torch.from_numpy(hs).view(torch.float4_e2m1fn_x2)
    q = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        t_hs, offs, torch.from_numpy(w), torch.from_numpy(hs_s).view(torch.float8_e4m3fn),
        torch.from_numpy(w_s), view, 0.5)
    assert isinstance(q, torch.Tensor) and q.dtype == torch.bfloat16 and q.shape == (m, q_dim)
    np.testing.assert_array_equal(bits(q), ref.encode_bf16(c[:, :q_dim].astype(np.float32)))
    assert kv.blocks.data_ptr() == address
    assert bits(kv.blocks).tobytes() == want.tobytes()

    # The indexer's fp8 K cache, stored then searched, in the engine's tensors.
    d, h = 32, 4
    kc, offs = engine_cache(rng, torch.float8_e4m3fn, cache_lens, seq_lens, 1, d, 1, scales=True)
    kview = quantkv.PagedCacheView(kc.blocks, kc.cache_lengths, kc.lookup_table, kc.scales)
    reference = numpy_side(kc, "float8_e4m3fn")
    for b, length in enumerate(cache_lens):  # exact keys for the cached positions
        pos = np.arange(length)
        _, (pages, slots) = ref.cache_rows(reference, b, pos)
        reference.blocks[pages, 0, 0, slots] = ref.encode_e4m3(
            rng.integers(-4, 5, size=(length, 1, d)).astype(np.float32))
        reference.scales[pages, 0, 0, slots] = np.exp2(rng.integers(-2, 3, size=(length, 1, 1)))
    new_keys = rng.integers(-4, 5, size=(m, d)).astype(np.float32)
    quantkv.indexer_k_store(torch.from_numpy(new_keys), offs, kview)
    codes, scales = ref.indexer_k_store(new_keys)
    for b in range(2):
        rows = np.arange(int(offs[b]), int(offs[b + 1]))
        got, _ = ref.cache_rows(reference, b, cache_lens[b] + rows - int(offs[b]))
        np.testing.assert_array_equal(got[:, 0], codes[rows])
        got_s = ref.cache_scale_rows(reference, b, cache_lens[b] + rows - int(offs[b]))
        np.testing.assert_array_equal(got_s[:, 0, 0], scales[rows])
    # The indexer reads the same lengths: this batch's keys sit at cache_len + i.
    q8 = ref.encode_e4m3(rng.integers(-3, 4, size=(m, h, d)).astype(np.float32))
    q_s = rng.integers(-2, 4, size=(m, h)).astype(np.float32)
    out = torch.full((m, 6), 99, dtype=torch.int32)
    address = out.data_ptr()
    got = quantkv.mla_indexer_ragged_float8_paged(torch.from_numpy(q8).view(torch.float8_e4m3fn),
                                                  torch.from_numpy(q_s), offs, kview, 6, out=out)
    assert got is out and out.data_ptr() == address
    np.testing.assert_array_equal(out.numpy(), reference_indices(q8, q_s, offs.numpy(), reference, 0, True, 6))


def test_torch_library_ops_eager_and_compiled(rng):
    import quantkv.torch  # noqa: F401  (registers torch.ops.quantkv)

    d, h, cache_lens, seq_lens = 32, 2, [3, 6], [2, 5]
    kc, offs = engine_cache(rng, torch.float8_e4m3fn, cache_lens, seq_lens, 1, d, 1, scales=True)
    m = int(offs[-1])
    keys = torch.from_numpy(rng.normal(size=(m, d)).astype(np.float32))
    q = torch.from_numpy(rng.normal(size=(m, h, d)).astype(np.float32))
    w = torch.from_numpy(rng.normal(size=(m, h)).astype(np.float32))

    def step(blocks, scales, keys, q, w):
        torch.ops.quantkv.indexer_k_store(keys, offs, blocks, scales, kc.cache_lengths, kc.lookup_table)
        q8, q_s = torch.ops.quantkv.indexer_q_prepare(q, w)
        top = torch.ops.quantkv.mla_indexer_ragged_float8_paged(
            q8, q_s, offs, blocks, scales, kc.cache_lengths, kc.lookup_table, 4)
        return top + 1, q_s * 2

    eager_blocks, eager_scales = kc.blocks.clone(), kc.scales.clone()
    eager = step(eager_blocks, eager_scales, keys, q, w)
    compiled = torch.compile(step, fullgraph=True)
    got = compiled(kc.blocks, kc.scales, keys, q, w)
    torch.testing.assert_close(got[0], eager[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], eager[1], rtol=0, atol=0)
    assert bits(kc.blocks).tobytes() == bits(eager_blocks).tobytes()
    assert torch.equal(kc.scales, eager_scales)
    x = torch.from_numpy(rng.normal(size=(4, 64)).astype(np.float32))
    data, scales = torch.ops.quantkv.quantize_dynamic_block_scaled(x, "mxfp4", 1.0)
    want_d, want_s = quantkv.quantize_dynamic_block_scaled(x.numpy(), "mxfp4")
    np.testing.assert_array_equal(bits(data), want_d)
    np.testing.assert_array_equal(bits(scales), want_s)
    # The fused projection op on an engine bf16 cache: the same bytes as the function.
    kv, kv_offs = engine_cache(rng, torch.bfloat16, cache_lens, seq_lens, 2, HEAD, KV_HEADS)
    rows, q_dim = int(kv_offs[-1]), 8
    hs, hs_s, wq, wq_s = [torch.from_numpy(a) for a in
                          exact_operands(rng, "nvfp4", rows, q_dim + 2 * KV_HEADS * HEAD, 32)]
    blocks_fn = kv.blocks.clone()
    q_fn = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, kv_offs, wq, hs_s, wq_s, quantkv.PagedCacheView(blocks_fn, kv.cache_lengths, kv.lookup_table), 0.5)
    qkv_args = (hs, kv_offs, wq, hs_s, wq_s, kv.blocks, kv.cache_lengths, kv.lookup_table, q_dim, 0.5)
    q_op = torch.ops.quantkv.fused_qkv_paged(*qkv_args)
    assert torch.equal(q_op.view(torch.int16), q_fn.view(torch.int16))
    assert bits(kv.blocks).tobytes() == bits(blocks_fn).tobytes()
    torch.library.opcheck(torch.ops.quantkv.fused_qkv_paged, qkv_args, test_utils=("test_faketensor",))

    # torch's check that the fake implementations agree with the real ops (its schema check
    # cannot run: it compares inputs, and torch has no fp8/fp4 comparison on CPU).
    q8, q_s = torch.ops.quantkv.indexer_q_prepare(q, w)
    for op, args in [(torch.ops.quantkv.mla_indexer_ragged_float8_paged,
                      (q8, q_s, offs, kc.blocks, kc.scales, kc.cache_lengths, kc.lookup_table, 4)),
                     (torch.ops.quantkv.indexer_q_prepare, (q, w)),
                     (torch.ops.quantkv.quantize_dynamic_block_scaled, (x, "nvfp4", 1.0)),
                     (torch.ops.quantkv.quantize_dynamic_block_scaled, (x, "mxfp8", 1.0))]:
        torch.library.opcheck(op, args, test_utils=("test_faketensor",))
