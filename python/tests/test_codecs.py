"""The module's codecs and scale converters against the numpy reference, the DLPack input
path, and the ValueError messages for bad input."""
import numpy as np
import pytest

import numpy_reference as ref
import quantkv


class DLPackOnly:
    """A CPU tensor that is not a numpy array but speaks DLPack (as torch/jax tensors do)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def interesting_floats(rng, n=20000):
    """Random floats over many binades plus every rounding boundary of the formats."""
    mags = np.exp2(rng.uniform(-12, 10, n)).astype(np.float32) * rng.choice([-1, 1], n)
    e4m3 = ref.E4M3_VALUES[:127]
    mids = (e4m3[1:] + e4m3[:-1]) / 2
    e2m1 = ref.E2M1_VALUES[:8]
    extra = np.concatenate([e4m3, mids, -mids, np.nextafter(mids.astype(np.float32), np.float32(0)),
                            e2m1, (e2m1[1:] + e2m1[:-1]) / 2, [0.0, -0.0, 448, 464, 1e30, np.inf, -np.inf]])
    return np.concatenate([mags, extra.astype(np.float32)]).astype(np.float32)


def test_version_and_isa():
    assert quantkv.__version__ == quantkv.version() and quantkv.version().count(".") == 2
    before = quantkv.isa_level()
    assert before in ("scalar", "avx2", "avx512", "neon", "neon-dotprod", "neon-bf16")
    quantkv.set_isa_level("scalar")
    assert quantkv.isa_level() == "scalar"
    quantkv.set_isa_level(before)
    with pytest.raises(ValueError):
        quantkv.set_isa_level("sse9")
    assert set(quantkv.build_info()) == {"openmp", "cuda_compiled", "cuda_architectures", "compiler"}


def test_encoders_match_reference(rng):
    x = interesting_floats(rng)
    assert np.array_equal(quantkv.encode_e4m3(x), ref.encode_e4m3(x))
    assert np.array_equal(quantkv.encode_e2m1(x), ref.encode_e2m1(x))
    assert np.array_equal(quantkv.encode_e8m0(x), ref.encode_e8m0(x))
    assert np.array_equal(quantkv.encode_bf16(x), ref.encode_bf16(x))
    nan = np.array([np.nan], dtype=np.float32)
    assert quantkv.encode_e4m3(nan)[0] == 0x7F and quantkv.encode_e2m1(nan)[0] == 7
    assert quantkv.encode_e8m0(nan)[0] == 0xFF and quantkv.encode_bf16(nan)[0] == 0x7FFF


def test_decoders_match_reference():
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(quantkv.decode_e4m3(codes), ref.decode_e4m3(codes).astype(np.float32))
    np.testing.assert_array_equal(quantkv.decode_e2m1(codes[:16]), ref.decode_e2m1(codes[:16]).astype(np.float32))
    e8 = quantkv.decode_e8m0(codes)
    np.testing.assert_array_equal(e8[1:], ref.decode_e8m0(codes)[1:].astype(np.float32))
    assert e8[0] == np.float32(2.0**-127)
    bits = np.array([0x3F80, 0xC040, 0x0001], dtype=np.uint16)
    np.testing.assert_array_equal(quantkv.decode_bf16(bits), ref.decode_bf16(bits))


def test_pack_unpack(rng):
    x = rng.normal(size=(3, 5, 64)).astype(np.float32) * 3
    packed = quantkv.pack_e2m1(x)
    assert packed.shape == (3, 5, 32) and packed.dtype == np.uint8
    assert np.array_equal(packed, ref.pack_e2m1(ref.encode_e2m1(x)))
    np.testing.assert_array_equal(quantkv.unpack_e2m1(packed), ref.decode_e2m1(ref.encode_e2m1(x)))
    # Non-contiguous input is fine.
    assert np.array_equal(quantkv.pack_e2m1(x[:, ::2]), packed[:, ::2])
    with pytest.raises(ValueError, match="even last dimension"):
        quantkv.pack_e2m1(x[..., :3])


def test_scale_layout_matches_reference(rng):
    for rows, kb in [(1, 1), (127, 3), (128, 4), (129, 5), (300, 9)]:
        lin = rng.integers(1, 255, size=(rows, kb), dtype=np.uint8)
        swz = quantkv.linear_to_swizzled_scales(lin)
        assert swz.shape == quantkv.swizzled_scale_shape(rows, kb)
        assert np.array_equal(swz, ref.swizzle_scales(lin))
        assert np.array_equal(quantkv.swizzled_to_linear_scales(swz, rows, kb), lin)
    # Strided (transposed) linear input.
    lin = rng.integers(1, 255, size=(6, 40), dtype=np.uint8)
    assert np.array_equal(quantkv.linear_to_swizzled_scales(lin.T), ref.swizzle_scales(lin.T.copy()))


def test_dlpack_inputs_are_zero_copy_views(rng):
    x = rng.normal(size=(4, 32)).astype(np.float32)
    assert np.array_equal(quantkv.encode_e4m3(DLPackOnly(x)), quantkv.encode_e4m3(x))
    lin = rng.integers(1, 255, size=(10, 4), dtype=np.uint8)
    assert np.array_equal(quantkv.linear_to_swizzled_scales(DLPackOnly(lin)), ref.swizzle_scales(lin))


def test_bad_input_raises_with_the_library_message():
    with pytest.raises(ValueError, match=r"x: expected dtype float32, got float64"):
        quantkv.encode_e4m3(np.zeros(4))
    with pytest.raises(ValueError, match=r"linear: expected rank 2 \[R, Kb\], got shape \[4\]"):
        quantkv.linear_to_swizzled_scales(np.zeros(4, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"swizzled: expected shape \[1, 1, 32, 4, 4\] for R = 3, "
                                         r"Kb = 2, got shape \[2, 1, 32, 4, 4\]"):
        quantkv.swizzled_to_linear_scales(np.zeros((2, 1, 32, 4, 4), dtype=np.uint8), 3, 2)
    with pytest.raises(TypeError, match="linear: expected a numpy array or an object with __dlpack__"):
        quantkv.linear_to_swizzled_scales([[1, 2]])
