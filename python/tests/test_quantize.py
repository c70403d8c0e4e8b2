"""quantize_dynamic_block_scaled against the numpy reference (bit for bit: the contract fixes
every float32 step) and the round trip through the reference dequantiser."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv

SHAPES = {"nvfp4": [(1, 16), (5, 48), (130, 64)], "mxfp4": [(1, 32), (3, 96), (129, 64)],
          "mxfp8": [(1, 32), (4, 64), (131, 96)]}


def activations(rng, m, k):
    """Rows with magnitudes spread over several binades, a zero block, a huge outlier."""
    x = rng.normal(size=(m, k)) * np.exp2(rng.integers(-6, 6, size=(m, 1)))
    if m > 1:
        x[0, :16] = 0.0
    if m > 2:
        x[2, 3] = 3e4
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_matches_reference_bitwise(fmt, rng):
    for isa in ["scalar", quantkv.max_supported_isa()]:
        quantkv.set_isa_level(isa)
        for m, k in SHAPES[fmt]:
            x = activations(rng, m, k)
            g = 448.0 * 6.0 / float(np.max(np.abs(x))) if fmt == "nvfp4" else 1.0
            data, scales = quantkv.quantize_dynamic_block_scaled(x, fmt, g)
            ref_data, ref_scales = ref.quantize_dynamic_block_scaled(x, fmt, g)
            assert data.shape == ref_data.shape and scales.shape == ref_scales.shape
            np.testing.assert_array_equal(scales, ref_scales, err_msg=f"{fmt} {m}x{k} scales, {isa}")
            np.testing.assert_array_equal(data, ref_data, err_msg=f"{fmt} {m}x{k} data, {isa}")
            # bf16 input (uint16 bits) quantises its decoded values.
            xb = ref.encode_bf16(x)
            data_b, scales_b = quantkv.quantize_dynamic_block_scaled(xb, fmt, g)
            rd, rs = ref.quantize_dynamic_block_scaled(ref.decode_bf16(xb), fmt, g)
            np.testing.assert_array_equal(data_b, rd)
            np.testing.assert_array_equal(scales_b, rs)
    quantkv.set_isa_level(quantkv.max_supported_isa())


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_round_trip(fmt, rng):
    m, k = 64, 128
    # A moderate dynamic range: NVFP4's e4m3 block scales flush blocks far below the global
    # amax to zero, which is the format, not an error.
    x = (rng.normal(size=(m, k)) * np.exp2(rng.integers(-2, 3, size=(m, 1)))).astype(np.float32)
    g = 448.0 * 6.0 / float(np.max(np.abs(x))) if fmt == "nvfp4" else 1.0
    data, scales = quantkv.quantize_dynamic_block_scaled(x, fmt, g)
    back = ref.dequantize(data, scales, fmt, m, k) / (g if fmt == "nvfp4" else 1.0)
    sfv = ref.FORMATS[fmt][0]
    amax = np.repeat(np.max(np.abs(x.reshape(m, k // sfv, sfv)), axis=2), sfv, axis=1)
    # fp4: half of the widest e2m1 step (1 of 6) plus the scale's rounding; fp8: half an ulp.
    bound = 0.2 * amax + 1e-6 if fmt != "mxfp8" else 0.0625 * np.abs(x) + amax * 2.0**-17
    assert np.all(np.abs(back - x) <= bound)


def test_bad_input():
    with pytest.raises(ValueError, match="x: expected dtype float32, bfloat16 or uint16"):
        quantkv.quantize_dynamic_block_scaled(np.zeros((2, 32)), "mxfp8")
    with pytest.raises(ValueError, match="16"):
        quantkv.quantize_dynamic_block_scaled(np.zeros((2, 24), dtype=np.float32), "nvfp4")
    with pytest.raises(ValueError, match="format: expected 'nvfp4', 'mxfp4' or 'mxfp8'"):
        quantkv.quantize_dynamic_block_scaled(np.zeros((2, 32), dtype=np.float32), "int4")
    with pytest.raises(ValueError, match=r"x: expected rank 2 \[M, K\]"):
        quantkv.quantize_dynamic_block_scaled(np.zeros(32, dtype=np.float32), "mxfp8")
