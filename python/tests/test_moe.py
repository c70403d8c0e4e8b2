"""The fused experts (quantkv.fused_experts) against a float64 numpy mixture of experts: both
activations and gate/up layouts, biases, ids outside the local range (expert_offset), duplicate
ids; the quantised mode equals the composition of quantkv's own quantiser and quantkv.linear bit
for bit; torch tensors in, torch tensors out; errors name the argument.

The bound of the weight-only mode (docs/moe.md): the library rounds h to bf16 before w2 (relative
2^-9) and runs every GEMM and the combine in fp32, so per output
|y - y64| <= 2^-7 * sum_j |w_j| (|h64_j| . |W2_e|^T + |b2_e|) + 2^-7 * |y64| + 1e-6."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv

FORMATS = ["nvfp4", "mxfp4", "mxfp8"]


def quantized_stack(rng, fmt, e, n, k, scale=1.0):
    """E weights [N, K] from quantkv's quantiser: data [E, N, row_bytes(K)], row-major scales
    [E, N, K / SFV], float64 dequantised [E, N, K] and the global scales g [E]."""
    sfv = 16 if fmt == "nvfp4" else 32
    datas, rows, deqs, gs = [], [], [], []
    for _ in range(e):
        w = (rng.normal(0, scale, (n, k))).astype(np.float32)
        g = 1.0 if fmt != "nvfp4" else 448.0 * 6.0 / float(np.abs(w).max())
        data, scales = quantkv.quantize_dynamic_block_scaled(w, format=fmt, global_scale=g)
        datas.append(np.asarray(data))
        rows.append(ref.unswizzle_scales(np.asarray(scales), n, k // sfv))
        deqs.append(ref.dequantize(np.asarray(data), np.asarray(scales), fmt, n, k) / g)
        gs.append(g)
    return np.stack(datas), np.stack(rows), np.stack(deqs), np.array(gs, np.float32)


def make_layer(rng, fmt, e, h, i):
    w13, s13, d13, g13 = quantized_stack(rng, fmt, e, 2 * i, h, 0.2)
    w2, s2, d2, g2 = quantized_stack(rng, fmt, e, h, i, 0.2)
    experts = quantkv.prepare_experts(w13, s13, w2, s2, format=fmt, w13_alpha=list(1.0 / g13),
                                      w2_alpha=list(1.0 / g2))
    return experts, (w13, s13, d13, g13), (w2, s2, d2, g2)


def act64(g, u, activation, layout, alpha=1.702, limit=7.0):
    i = g.shape[-1] // 2
    gate, up = (g[..., 0::2], g[..., 1::2]) if layout == "interleaved" else (g[..., :i], g[..., i:])
    if activation == "silu":
        return gate / (1.0 + np.exp(-gate)) * up
    gate = np.minimum(gate, limit)
    up = np.clip(up, -limit, limit)
    return gate / (1.0 + np.exp(-alpha * gate)) * (up + 1.0)


def moe64(x, ids, weights, d13, d2, offset, activation, layout, b13=None, b2=None):
    t, k = ids.shape
    e_count, h_dim = d2.shape[0], d2.shape[1]
    y = np.zeros((t, h_dim))
    s = np.zeros((t, h_dim))  # the bound's sum
    for t_ in range(t):
        for j in range(k):
            e = int(ids[t_, j]) - offset
            if e < 0 or e >= e_count:
                continue
            g = d13[e] @ x[t_] + (0.0 if b13 is None else b13[e])
            h = act64(g, None, activation, layout)
            o = d2[e] @ h + (0.0 if b2 is None else b2[e])
            y[t_] += weights[t_, j] * o
            s[t_] += abs(weights[t_, j]) * (np.abs(d2[e]) @ np.abs(h) + (0.0 if b2 is None else np.abs(b2[e])))
    return y, s


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("activation,layout", [("silu", "halves"), ("swiglu_oai", "interleaved"),
                                               ("silu", "interleaved"), ("swiglu_oai", "halves")])
def test_weight_only_within_bound_of_float64(rng, fmt, activation, layout):
    e, h, i, t, k, offset = 4, 64, 64, 13, 3, 2
    experts, (_, _, d13, _), (_, _, d2, _) = make_layer(rng, fmt, e, h, i)
    assert (experts.num_experts, experts.hidden, experts.intermediate) == (e, h, i)
    x = ref.encode_bf16(rng.normal(0, 1, (t, h)).astype(np.float32))
    ids = rng.integers(0, e + 4, (t, k)).astype(np.int64)  # some outside [2, 6): skipped
    ids[0] = [3, 3, 3]  # duplicates: three routes
    weights = rng.uniform(0, 1, (t, k)).astype(np.float32)
    b13 = rng.normal(0, 0.5, (e, 2 * i)).astype(np.float32)
    b2 = rng.normal(0, 0.5, (e, h)).astype(np.float32)
    y = quantkv.fused_experts(x, ids, weights, experts, expert_offset=offset, gate_up=layout,
                              activation=activation, w13_bias=b13, w2_bias=b2, out_dtype="float32")
    assert y.shape == (t, h) and y.dtype == np.float32
    want, s = moe64(ref.decode_bf16(x).astype(np.float64), ids, weights.astype(np.float64), d13,
                    d2, offset, activation, layout, b13.astype(np.float64), b2.astype(np.float64))
    bound = 2.0 ** -7 * (s + np.abs(want)) + 1e-6
    assert np.all(np.abs(y - want) <= bound), np.max(np.abs(y - want) / bound)
    assert np.count_nonzero(y) > y.size // 2
    # bf16 output: the fp32 one rounded (RNE).
    y16 = quantkv.fused_experts(x, ids, weights, experts, expert_offset=offset, gate_up=layout,
                                activation=activation, w13_bias=b13, w2_bias=b2)
    assert y16.dtype == np.uint16
    np.testing.assert_array_equal(y16, ref.encode_bf16(y))


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_gate_and_up_with_their_own_global_scales(rng, layout):
    """NVFP4 gate and up quantised with different global scales: w13_alpha gate's, w3_alpha
    up's; the weight-only result stays within the bound of the float64 mixture."""
    e, h, i, t, k = 3, 64, 32, 6, 2
    wg, sg, dg, gg = quantized_stack(rng, "nvfp4", e, i, h, 0.2)
    wu, su, du, gu = quantized_stack(rng, "nvfp4", e, i, h, 0.05)  # another amax: another g
    assert np.all(np.abs(gg / gu - 1.0) > 0.5)
    w2, s2, d2, g2 = quantized_stack(rng, "nvfp4", e, h, i, 0.2)
    if layout == "halves":
        w13, s13, d13 = (np.concatenate(p, axis=1) for p in ((wg, wu), (sg, su), (dg, du)))
    else:  # rows alternate gate i, up i
        w13, s13, d13 = (np.stack(p, axis=2).reshape(e, 2 * i, -1)
                         for p in ((wg, wu), (sg, su), (dg, du)))
    experts = quantkv.prepare_experts(w13, s13, w2, s2, format="nvfp4", w13_alpha=list(1.0 / gg),
                                      w3_alpha=list(1.0 / gu), w2_alpha=list(1.0 / g2))
    x = ref.encode_bf16(rng.normal(0, 1, (t, h)).astype(np.float32))
    ids = rng.integers(0, e, (t, k)).astype(np.int32)
    weights = rng.uniform(0, 1, (t, k)).astype(np.float32)
    y = quantkv.fused_experts(x, ids, weights, experts, gate_up=layout, out_dtype="float32")
    want, s = moe64(ref.decode_bf16(x).astype(np.float64), ids, weights.astype(np.float64), d13,
                    d2, 0, "silu", layout)
    bound = 2.0 ** -7 * (s + np.abs(want)) + 1e-6
    assert np.all(np.abs(y - want) <= bound), np.max(np.abs(y - want) / bound)
    # Gate's factor for both halves (what an engine keeping one scale gets) is outside it.
    one = quantkv.prepare_experts(w13, s13, w2, s2, format="nvfp4", w13_alpha=list(1.0 / gg),
                                  w2_alpha=list(1.0 / g2))
    y1 = quantkv.fused_experts(x, ids, weights, one, gate_up=layout, out_dtype="float32")
    assert not np.all(np.abs(y1 - want) <= bound)
    with pytest.raises(ValueError, match="w3_alpha"):
        quantkv.prepare_experts(w13, s13, w2, s2, format="nvfp4", w3_alpha=[1.0] * (e + 1))


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantised_equals_quantiser_and_linear(rng, fmt):
    e, h, i, t = 1, 64, 64, 5
    experts, (w13, s13, _, g13), (w2, s2, _, g2) = make_layer(rng, fmt, e, h, i)
    x = ref.encode_bf16(rng.normal(0, 1, (t, h)).astype(np.float32))
    ids = np.zeros((t, 1), np.int32)
    ones = np.ones((t, 1), np.float32)
    y = quantkv.fused_experts(x, ids, ones, experts, quantize_activations=True, out_dtype="float32")
    # The same by hand: quantise x, w13 through linear, silu * up, quantise h, w2 through linear.
    p13 = quantkv.prepare_weights(w13[0], scale_rows=s13[0], format=fmt)
    p2 = quantkv.prepare_weights(w2[0], scale_rows=s2[0], format=fmt)
    xq, xs = quantkv.quantize_dynamic_block_scaled(x, format=fmt)
    gu = np.asarray(quantkv.linear(xq, p13, x_scale=xs, alpha=np.float32(1.0) / g13[0],
                                   out_dtype="float32"))
    with np.errstate(over="ignore"):
        gate, up = gu[:, :i], gu[:, i:]
        hh = (gate / (np.float32(1) + np.exp(-gate))) * up
    hq, hs = quantkv.quantize_dynamic_block_scaled(hh.astype(np.float32), format=fmt)
    want = np.asarray(quantkv.linear(hq, p2, x_scale=hs, alpha=np.float32(1.0) / g2[0],
                                     out_dtype="float32"))
    # numpy's float32 exp may differ from the C library's in the last bit: compare closely, and
    # most elements exactly.
    assert np.allclose(y, want, rtol=1e-2, atol=1e-3)
    assert np.mean(y == want) > 0.5


def test_no_local_route_and_empty_batch(rng):
    experts, _, _ = make_layer(rng, "mxfp4", 2, 32, 32)
    x = ref.encode_bf16(rng.normal(0, 1, (2, 32)).astype(np.float32))
    y = quantkv.fused_experts(x, np.array([[5, -1], [7, 9]], np.int32), np.ones((2, 2), np.float32),
                              experts, out_dtype="float32")
    np.testing.assert_array_equal(y, np.zeros((2, 32), np.float32))
    y = quantkv.fused_experts(np.zeros((0, 32), np.uint16), np.zeros((0, 2), np.int32),
                              np.zeros((0, 2), np.float32), experts)
    assert y.shape == (0, 32)


def test_torch_tensors_in_torch_tensors_out(rng):
    torch = pytest.importorskip("torch")
    experts, (_, _, d13, _), (_, _, d2, _) = make_layer(rng, "nvfp4", 3, 32, 32)
    x = torch.randn(6, 32, dtype=torch.bfloat16)
    weights, ids = torch.topk(torch.rand(6, 3), 2)  # int64 ids
    y = quantkv.fused_experts(x, ids, weights, experts)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (6, 32)
    want, s = moe64(x.double().numpy(), ids.numpy(), weights.double().numpy(), d13, d2, 0, "silu",
                    "halves")
    assert np.all(np.abs(y.double().numpy() - want) <= 2.0 ** -7 * (s + np.abs(want)) + 1e-6)


def test_errors_name_the_argument(rng):
    experts, _, _ = make_layer(rng, "nvfp4", 2, 32, 16)
    x = np.zeros((3, 32), np.uint16)
    ids = np.zeros((3, 2), np.int32)
    w = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="topk_weights"):
        quantkv.fused_experts(x, ids, np.ones((3, 1), np.float32), experts)
    with pytest.raises(ValueError, match="gate_up"):
        quantkv.fused_experts(x, ids, w, experts, gate_up="stacked")
    with pytest.raises(ValueError, match="activation"):
        quantkv.fused_experts(x, ids, w, experts, activation="gelu")
    with pytest.raises(ValueError, match="x: expected"):
        quantkv.fused_experts(np.zeros((3, 48), np.uint16), ids, w, experts)
    with pytest.raises(TypeError, match="topk_ids"):
        quantkv.fused_experts(x, np.zeros((3, 2), np.float32), w, experts)
    w13 = np.zeros((2, 32, 16), np.uint8)
    with pytest.raises(ValueError, match="w2"):
        quantkv.prepare_experts(w13, np.zeros((2, 32, 2), np.uint8), w13,
                                np.zeros((2, 32, 2), np.uint8))


def test_torch_op_equals_the_function_eager_and_compiled(rng):
    torch = pytest.importorskip("torch")
    import quantkv.torch as qt

    experts, _, _ = make_layer(rng, "nvfp4", 3, 32, 32)
    handle = qt.register_prepared_weights(experts)
    x = torch.randn(5, 32, dtype=torch.bfloat16)
    weights, ids = torch.topk(torch.rand(5, 3), 2)
    ids = ids.to(torch.int32)
    want = quantkv.fused_experts(x, ids, weights, experts)
    got = torch.ops.quantkv.fused_experts(x, ids, weights, handle)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    compiled = torch.compile(lambda a, b, c: torch.ops.quantkv.fused_experts(a, b, c, handle),
                             fullgraph=True)
    assert torch.equal(compiled(x, ids, weights).view(torch.int16), want.view(torch.int16))
    torch.library.opcheck(torch.ops.quantkv.fused_experts, (x, ids, weights, handle),
                          test_utils=("test_faketensor",))
    with pytest.raises(ValueError, match="experts_handle"):
        torch.ops.quantkv.fused_experts(x, ids, weights, handle + 1)
    qt.release_prepared_weights(handle)
