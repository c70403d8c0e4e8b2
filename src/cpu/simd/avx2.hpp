// Internal: the AVX2 building blocks of the *_avx2.cpp microkernels, one copy each: the e4m3
// decoders (to f32 and, by byte lookups, to bf16) and bf16 -> f32 widening. Include only from
// translation units compiled with the AVX2 flags (internal linkage: see qkv_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>

namespace quantkv::cpu::simd {
namespace {

// The AVX2 e4m3 decoder: 8 e4m3 codes (zero-extended to 32 bits) -> float bits (exact; the
// same bits as formats.hpp's e4m3_to_float). Normals by exponent rebias, subnormals as
// m * 2^-9 from an integer (no float subnormals: safe under FTZ/DAZ), NaN the canonical one.
inline __m256i e4m3_to_f32_bits(__m256i code) {
  const __m256i mag = _mm256_and_si256(code, _mm256_set1_epi32(0x7F));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256i sub =
      _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f)));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F));
  __m256i bits = _mm256_blendv_epi8(normal, sub, is_sub);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), is_nan);
  return _mm256_or_si256(bits, sign);
}

// 8 bf16 (bits, in a 128-bit register) -> 8 floats (exact).
inline __m256 bf16_to_f32(__m128i bf16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}
// 8 bf16 at p (unaligned) -> 8 floats.
inline __m256 load_bf16_as_f32(const uint16_t* p) {
  return bf16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// n bf16 at src (n a multiple of 8) -> n floats at dst (32-byte aligned).
inline void widen_bf16_aligned(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 8) _mm256_store_ps(dst + i, load_bf16_as_f32(src + i));
}

// bf16 pairs (even k in the low, odd k in the high half of each 32-bit lane) -> the odd and
// the even elements as fp32 (exact).
inline __m256 bf16_pair_odd(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}
inline __m256 bf16_pair_even(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
}

// A pshufb table: f of the index nibble, in both 128-bit halves; built at compile time.
template <class F>
constexpr std::array<uint8_t, 32> nibble_table(F f) {
  std::array<uint8_t, 32> t{};
  for (int i = 0; i < 32; ++i) t[i] = f(i % 16);
  return t;
}
inline __m256i load_table(const std::array<uint8_t, 32>& t) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(t.data()));
}

// e4m3 codes -> bf16 bits with byte lookups (exact, the same bits as convert_e4m3_to_bf16): a
// normal code s.eeee.mmm is bf16 s | (e + 120) << 7 | m << 4, whose high byte is a lookup of
// the code's high nibble (s, e >> 1) and whose low byte is the code's low nibble (e & 1, m)
// shifted up by 4 (120 is even). The special codes, e = 0 (zero and the subnormals m * 2^-9,
// normal in bf16; low nibble m < 8) and NaN (0x7F / 0xFF: s | 0x7FC0; low nibble 15), are
// lookups of the low nibble, the sign or-ed in: magnitude + 1 (mod 128) < 9 marks them. One
// call takes 32 codes and gives their bf16 words 0..7 and 16..23 in words[0], 8..15 and
// 24..31 in words[1] (the unpacks work per 128-bit half): in_order() puts them back in order.
// Over a pair vector of a prepared MXFP8 half (32 codes: columns 0..15 x k even, odd, byte
// 2c + k % 2) words[0] holds the bf16 pairs of columns 0..3 and 8..11, words[1] those of 4..7
// and 12..15, and columns_in_order() puts sums over them back in column order.
struct E4m3Bf16Decoder {
  alignas(32) static constexpr std::array<uint8_t, 32> kNormalHi = nibble_table([](int h) {
    return uint8_t((h & 8) << 4 | (60 + (h & 7)));
  });
  alignas(32) static constexpr std::array<uint8_t, 32> kSpecialHi = nibble_table([](int n) {
    return uint8_t(n == 15 ? 0x7F : n == 0 ? 0x00 : n < 4 ? 0x3B : 0x3C);
  });
  alignas(32) static constexpr std::array<uint8_t, 32> kSpecialLo = nibble_table([](int n) {
    constexpr uint8_t lo[8] = {0x00, 0x00, 0x80, 0xC0, 0x00, 0x20, 0x40, 0x60};
    return n == 15 ? uint8_t(0xC0) : lo[n & 7];
  });
  __m256i normal_hi = load_table(kNormalHi), special_hi = load_table(kSpecialHi),
          special_lo = load_table(kSpecialLo);
  void operator()(const uint8_t* src, __m256i words[2]) const {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i low_nibble = _mm256_and_si256(v, nibble);
    __m256i hi = _mm256_shuffle_epi8(normal_hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
    __m256i lo = _mm256_and_si256(_mm256_slli_epi16(v, 4), _mm256_set1_epi8(int8_t(0xF0)));
    const __m256i special = _mm256_cmpgt_epi8(
        _mm256_set1_epi8(9),
        _mm256_and_si256(_mm256_add_epi8(v, _mm256_set1_epi8(1)), _mm256_set1_epi8(0x7F)));
    const __m256i sign = _mm256_and_si256(v, _mm256_set1_epi8(int8_t(0x80)));
    hi = _mm256_blendv_epi8(hi, _mm256_or_si256(_mm256_shuffle_epi8(special_hi, low_nibble), sign),
                            special);
    lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(special_lo, low_nibble), special);
    words[0] = _mm256_unpacklo_epi8(lo, hi);
    words[1] = _mm256_unpackhi_epi8(lo, hi);
  }
  // words[0], words[1] -> words 0..15 (first), 16..31 (second).
  static void in_order(const __m256i words[2], __m256i out[2]) {
    out[0] = _mm256_permute2x128_si256(words[0], words[1], 0x20);
    out[1] = _mm256_permute2x128_si256(words[0], words[1], 0x31);
  }
  // a: columns 0..3, 8..11; b: 4..7, 12..15 -> columns 0..7 (first), 8..15 (second).
  static void columns_in_order(__m256 a, __m256 b, __m256 out[2]) {
    out[0] = _mm256_permute2f128_ps(a, b, 0x20);
    out[1] = _mm256_permute2f128_ps(a, b, 0x31);
  }
};

}  // namespace
}  // namespace quantkv::cpu::simd
