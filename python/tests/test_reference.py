"""Self-tests of the numpy reference, from values written down by hand (contract §1-§4), so that a
disagreement with the library is not a bug in the reference."""
import numpy as np

import numpy_reference as ref


def test_e4m3_table():
    assert ref.E4M3_VALUES[0x7E] == 448.0 and ref.E4M3_VALUES[0xFE] == -448.0
    assert ref.E4M3_VALUES[0x01] == 2.0**-9 and ref.E4M3_VALUES[0x08] == 2.0**-6
    assert ref.E4M3_VALUES[0x38] == 1.0 and ref.E4M3_VALUES[0x3C] == 1.5
    assert np.isnan(ref.E4M3_VALUES[0x7F]) and np.isnan(ref.E4M3_VALUES[0xFF])
    finite = ref.E4M3_VALUES[:127]
    assert np.all(np.diff(finite) > 0)


def test_e4m3_encode_rounding():
    cases = {448.0: 0x7E, 464.0: 0x7E, 1e9: 0x7E, -np.inf: 0xFE, -1e-9: 0x80, 0.0: 0x00,
             1.0625: 0x38,   # tie between 1.0 (even) and 1.125 -> 1.0
             1.1875: 0x3A,   # tie between 1.125 and 1.25 (even) -> 1.25
             2.0**-10: 0x00,  # tie between 0 and 2^-9 -> 0
             3 * 2.0**-10: 0x02}
    for x, code in cases.items():
        assert ref.encode_e4m3(np.float32(x)) == code, x
    assert ref.encode_e4m3(np.nan) == 0x7F
    codes = np.array([c for c in range(256) if (c & 0x7F) != 0x7F], dtype=np.uint8)
    assert np.array_equal(ref.encode_e4m3(ref.decode_e4m3(codes)), codes)


def test_e2m1_and_e8m0():
    ties = {0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, 7.0: 7, -0.1: 8, -6.5: 15}
    for x, code in ties.items():
        assert ref.encode_e2m1(x) == code, x
    assert ref.encode_e2m1(np.nan) == 7
    assert list(ref.encode_e8m0([1.0, 3.0, 4.0, 0.75, np.inf, np.nan, 2.0**-130, 1e39])) == \
        [127, 129, 129, 127, 0xFE, 0xFF, 0, 0xFE]
    assert ref.decode_e8m0(np.uint8(130)) == 8.0


def test_bf16():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -1.0 - 2**-8, 3.0, np.nan], dtype=np.float32)
    assert list(ref.encode_bf16(x)) == [0x3F80, 0x3F80, 0x3F82, 0xBF80, 0x4040, 0x7FFF]


def test_pack_order():
    packed = ref.pack_e2m1(np.array([[1, 15, 2, 3]], dtype=np.uint8))
    assert packed.tolist() == [[0xF1, 0x32]]
    assert ref.unpack_e2m1(packed).tolist() == [[1, 15, 2, 3]]


def test_swizzle_matches_spec_offsets():
    rows, kb = 300, 7
    lin = (np.arange(rows * kb) % 251 + 1).astype(np.uint8).reshape(rows, kb)
    swz = ref.swizzle_scales(lin)
    assert swz.shape == (3, 2, 32, 4, 4)
    flat = swz.reshape(-1)
    tiles = (kb + 3) // 4
    for r in (0, 31, 32, 127, 128, 299):
        for c in (0, 3, 4, 6):
            off = (r // 128) * tiles * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            assert flat[off] == lin[r, c]
    assert np.count_nonzero(swz) == rows * kb
    assert np.array_equal(ref.unswizzle_scales(swz, rows, kb), lin)


def test_quantizer_reference_by_hand():
    # One NVFP4 block with g = 1: amax 6 -> sf = e4m3(6 * fl(1/6)) = 1.0, values unchanged.
    x = np.array([[6, -3, 0.5, 0.25] + [0] * 12], dtype=np.float32)
    data, scales = ref.quantize_dynamic_block_scaled(x, "nvfp4", 1.0)
    assert ref.decode_e4m3(ref.unswizzle_scales(scales, 1, 1))[0, 0] == 1.0
    assert ref.decode_e2m1(ref.unpack_e2m1(data))[0, :4].tolist() == [6, -3, 0.5, 0]
    # MXFP8: amax 896 -> sf = 2^ceil(log2(896/448)) = 2, values halved.
    x = np.full((1, 32), 896.0, dtype=np.float32)
    data, scales = ref.quantize_dynamic_block_scaled(x, "mxfp8")
    assert ref.decode_e8m0(ref.unswizzle_scales(scales, 1, 1))[0, 0] == 2.0
    assert np.all(ref.decode_e4m3(data) == 448.0)


def test_topk_order_and_eps_rule():
    s = np.array([1.0, 3.0, 3.0, np.nan, 2.0, 3.0])
    assert ref.topk_positions(s, 4).tolist() == [1, 2, 5, 4]
    assert ref.topk_positions(s, 8).tolist() == [1, 2, 5, 4, 0, 3, -1, -1]
    scores = np.array([1.0, 3.0, 3.0, -9.0, 2.0, 3.0])
    assert ref.check_topk_within_eps(np.array([1, 2, 5, 4], dtype=np.int32), scores, 1e-9, 4) == []
    # A missing high score, a wrong order, a duplicate: each is reported.
    assert ref.check_topk_within_eps(np.array([1, 2, 5, 0], dtype=np.int32), scores, 1e-9, 4)
    assert ref.check_topk_within_eps(np.array([4, 1, 2, 5], dtype=np.int32), scores, 1e-9, 4)
    assert ref.check_topk_within_eps(np.array([1, 1, 2, 5], dtype=np.int32), scores, 1e-9, 4)
    # Within ε, the order among near-equal scores is free.
    near = np.array([1.0, 1.0 + 1e-12, 0.0])
    assert ref.check_topk_within_eps(np.array([0, 1], dtype=np.int32), near, 1e-9, 2) == []
    assert ref.check_topk_within_eps(np.array([0, 1, -1], dtype=np.int32), near, 1e-9, 3)


def test_fused_qkv_reference_by_hand():
    # K = 32 MXFP4, one row of 1.0 and one weight row of 2.0, scales 1: c = 32 * 2 = 64.
    one = ref.pack_e2m1(ref.encode_e2m1(np.ones((1, 32))))
    two = ref.pack_e2m1(ref.encode_e2m1(np.full((1, 32), 2.0)))
    s = ref.swizzle_scales(np.full((1, 1), 127, dtype=np.uint8))
    c, _ = ref.fused_qkv(one, s, two, s, "mxfp4", 32, 0.5)
    assert c.tolist() == [[32.0]]
