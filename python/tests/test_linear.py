"""The plain linear layer (quantkv.linear) against float64 numpy: W4A4 (quantised activations
from quantkv's own quantiser), MXFP8 and the weight-only modes; the result equals the fused
QKV's Q columns bit for bit; row-major and swizzled scales prepare the same weight; torch tensors
in, torch tensors out; errors name the argument."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv

FORMATS = ["nvfp4", "mxfp4", "mxfp8"]


def random_weight(rng, fmt, n, k):
    """A quantised weight [N, K] from quantkv's quantiser: (data, swizzled scales, row-major
    scales, float64 dequantised)."""
    w = rng.normal(0, 1, (n, k)).astype(np.float32)
    g = 1.0 if fmt != "nvfp4" else 448.0 * 6.0 / float(np.abs(w).max())
    data, scales = quantkv.quantize_dynamic_block_scaled(w, format=fmt, global_scale=g)
    kb = k // (16 if fmt == "nvfp4" else 32)
    rows = ref.unswizzle_scales(np.asarray(scales), n, kb)
    deq = ref.dequantize(np.asarray(data), np.asarray(scales), fmt, n, k) / g
    return np.asarray(data), np.asarray(scales), rows, deq, g


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [0, 1, 7, 33])
def test_w4a4_within_fp32_rounding_of_float64(rng, fmt, m):
    n, k = 80, 256
    data, scales, _, deq_w, g_w = random_weight(rng, fmt, n, k)
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    g_x = 1.0 if fmt != "nvfp4" else 448.0 * 6.0 / max(float(np.abs(x).max()) if m else 1.0, 1e-3)
    xq, xs = quantkv.quantize_dynamic_block_scaled(x, format=fmt, global_scale=g_x)
    w = quantkv.prepare_weights(data, scale=scales, format=fmt)
    alpha = 1.0 / (g_x * g_w)
    bias = rng.normal(0, 1, n).astype(np.float32)
    y = quantkv.linear(xq, w, x_scale=xs, alpha=alpha, bias=bias, out_dtype="float32")
    assert y.shape == (m, n) and y.dtype == np.float32
    deq_x = ref.dequantize(np.asarray(xq), np.asarray(xs), fmt, m, k) / g_x
    want = deq_x @ deq_w.T + bias
    bound = 1e-5 * (np.abs(deq_x) @ np.abs(deq_w).T + np.abs(bias)) + 1e-30
    assert np.all(np.abs(y - want) <= bound)


@pytest.mark.parametrize("fmt", FORMATS)
def test_weight_only_bf16_output_and_row_major_scales(rng, fmt):
    m, n, k = 9, 48, 320
    data, scales, rows, deq_w, g_w = random_weight(rng, fmt, n, k)
    x = ref.encode_bf16(rng.normal(0, 1, (m, k)).astype(np.float32))
    w_sw = quantkv.prepare_weights(data, scale=scales, format=fmt)
    w_rows = quantkv.prepare_weights(data, scale_rows=rows, format=fmt)
    y1 = quantkv.linear(x, w_sw, alpha=1.0 / g_w)
    y2 = quantkv.linear(x, w_rows, alpha=1.0 / g_w)
    assert y1.dtype == np.uint16 and y1.shape == (m, n)
    np.testing.assert_array_equal(y1, y2)
    want = ref.decode_bf16(x).astype(np.float64) @ deq_w.T
    got = ref.decode_bf16(y1).astype(np.float64)
    assert np.all(np.abs(got - want) <= 2.0 ** -8 * np.abs(want) + 1e-5 * np.abs(ref.decode_bf16(x)) @ np.abs(deq_w).T + 1e-30)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_rows_equal_the_fused_qkv_q_columns(rng, fmt):
    kv_heads, head, q_dim, k = 2, 16, 48, 128
    n = q_dim + 2 * kv_heads * head
    data, scales, _, _, _ = random_weight(rng, fmt, n, k)
    xq, xs = quantkv.quantize_dynamic_block_scaled(rng.normal(0, 1, (5, k)).astype(np.float32), format=fmt)
    w = quantkv.prepare_weights(data, scale=scales, format=fmt)
    cache = quantkv.PagedKVCache(4, dtype="bfloat16", kv_dim=2, num_layers=1, page_size=8,
                                 num_heads=kv_heads, head_size=head, batch_size=1, max_pages_per_seq=2)
    cache.reserve(0, 5)
    offs = np.array([0, 5], dtype=np.uint32)
    q = quantkv.generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(xq, offs, w, xs, None, cache, 0.5, 0)
    y = quantkv.linear(xq, w, x_scale=xs, alpha=0.5)
    np.testing.assert_array_equal(np.asarray(y)[:, :q_dim], np.asarray(q))


def test_empty_batch(rng):
    data, scales, _, _, _ = random_weight(rng, "nvfp4", 32, 64)
    w = quantkv.prepare_weights(data, scale=scales)
    y = quantkv.linear(np.zeros((0, 64), np.uint16), w)
    assert y.shape == (0, 32)


def test_errors_name_the_argument(rng):
    data, scales, _, _, _ = random_weight(rng, "nvfp4", 32, 64)
    w = quantkv.prepare_weights(data, scale=scales)
    x = ref.encode_bf16(rng.normal(0, 1, (3, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="x_bf16"):
        quantkv.linear(x[:, :32], w)
    with pytest.raises(ValueError, match="alpha"):
        quantkv.linear(x, w, alpha=float("nan"))
    with pytest.raises(ValueError, match="bias"):
        quantkv.linear(x, w, bias=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="scale, scale_rows"):
        quantkv.prepare_weights(data)


def test_torch_tensors_in_torch_tensors_out(rng):
    torch = pytest.importorskip("torch")
    data, scales, _, deq_w, g_w = random_weight(rng, "nvfp4", 64, 128)
    w = quantkv.prepare_weights(torch.from_numpy(data), scale=torch.from_numpy(scales))
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    y = quantkv.linear(x, w, alpha=1.0 / g_w, bias=torch.zeros(64, dtype=torch.bfloat16))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (4, 64)
    want = x.double() @ torch.from_numpy(deq_w).T
    assert torch.allclose(y.double(), want, rtol=2e-2, atol=1e-2)


def test_torch_op_equals_the_function_eager_and_compiled(rng):
    torch = pytest.importorskip("torch")
    import quantkv.torch as qt

    data, scales, _, _, g_w = random_weight(rng, "nvfp4", 64, 128)
    w = quantkv.prepare_weights(data, scale=scales)
    handle = qt.register_prepared_weights(w)
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    want = quantkv.linear(x, w, alpha=1.0 / g_w)
    got = torch.ops.quantkv.linear(x, handle, 64, None, 1.0 / g_w)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    compiled = torch.compile(lambda a: torch.ops.quantkv.linear(a, handle, 64, None, 1.0 / g_w),
                             fullgraph=True)
    assert torch.equal(compiled(x).view(torch.int16), want.view(torch.int16))
    torch.library.opcheck(torch.ops.quantkv.linear, (x, handle, 64, None, 1.0 / g_w),
                          test_utils=("test_faketensor",))
    with pytest.raises(ValueError, match="n: expected"):
        torch.ops.quantkv.linear(x, handle, 65)
    qt.release_prepared_weights(handle)
