// Internal: the fp4 indexer K caches (IndexKFormat::kMxfp4, kNvfp4) as the score kernels read
// them and the K store writes them (docs/indexer.md, "MXFP4 K cache", "NVFP4 K cache").
//
// A key is D e2m1 codes (D/2 bytes, element 2i in the low nibble of byte i) and D/32 ue8m0
// bytes, value(d) = e2m1(code_d) * 2^(byte_{d/32} - 127). The kernels factor out the key's
// largest block scale: the key scale is 2^(max byte - 127) (NaN if a byte is 0xFF), and the
// repacked K holds e2m1(code_d) * 2^(byte_{d/32} - max byte), exact in bf16 and fp32, so the
// canonical order of indexer_kernels.hpp applies unchanged. A block more than 2^116 below the
// key's largest contributes zeros: then every product with an e4m3 q and every partial sum is a
// multiple of 2^-126 or zero, so no path meets a subnormal (vdpbf16ps flushes them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/recipes.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {
// Internal linkage: the ISA files include these helpers (scripts/check_isa_symbols.sh).
namespace {

inline constexpr int kMxfp4Block = 32;
inline constexpr int kMxfp4MinShift = -116;  // blocks shifted further down are zeros

inline int mxfp4_max_byte(const uint8_t* sf, int num_blocks) {
  int m = 0;
  for (int b = 0; b < num_blocks; ++b) m = sf[b] > m ? sf[b] : m;
  return m;
}

// The key scale 2^(max byte - 127): NaN for 0xFF, 2^-127 (a subnormal) for 0.
inline float mxfp4_key_scale(const uint8_t* sf, int num_blocks) {
  return e8m0_to_float(uint8_t(mxfp4_max_byte(sf, num_blocks)));
}

// Block b's shift byte_b - max byte, or a value below kMxfp4MinShift for a zeroed block.
inline int mxfp4_block_shift(const uint8_t* sf, int b, int max_byte) { return sf[b] - max_byte; }

// bf16 bits of e2m1 code c (sign in bit 3) times 2^shift, shift in [kMxfp4MinShift, 0].
inline uint16_t mxfp4_code_bf16(uint8_t c, int shift) {
  constexpr uint16_t kMag[8] = {0, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
  const uint16_t mag = kMag[c & 7u];
  const uint16_t v = mag == 0 ? 0 : uint16_t(mag + (shift << 7));
  return uint16_t(v | ((c & 8u) ? 0x8000u : 0u));
}

// One key's D values, relative to its key scale, as bf16 bits (uint16_t) or f32 (the same
// values).
inline uint16_t mxfp4_relative_value(uint8_t code, int shift, uint16_t*) {
  return mxfp4_code_bf16(code, shift);
}
inline float mxfp4_relative_value(uint8_t code, int shift, float*) {
  return e2m1_to_float(code) * recipe::pow2_float(shift);
}
template <typename Out>
void decode_mxfp4_key(const uint8_t* codes, const uint8_t* sf, int D, Out* out) {
  const int nb = D / kMxfp4Block, mx = mxfp4_max_byte(sf, nb);
  for (int b = 0; b < nb; ++b) {
    const int shift = mxfp4_block_shift(sf, b, mx);
    for (int i = 0; i < kMxfp4Block; ++i) {
      const int d = b * kMxfp4Block + i;
      const uint8_t code = uint8_t((codes[d / 2] >> (4 * (d & 1))) & 0xF);
      out[d] = shift < kMxfp4MinShift ? Out(0) : mxfp4_relative_value(code, shift, out);
    }
  }
}

// The K store's quantisation of one row of D values (D a multiple of 32) read through
// load(i): codes (D/2 bytes) and block-scale bytes (D/32). NaN inputs are ignored by amax and
// encode as +6 (float_to_e2m1).
template <typename Load>
void quantize_row_mxfp4(Load load, int64_t D, uint8_t* codes, uint8_t* sf) {
  for (int64_t b = 0; b < D / kMxfp4Block; ++b) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kMxfp4Block; ++i) amax = recipe::amax_update(amax, load(b * 32 + i));
    const uint8_t s = recipe::mxfp4_index_block_scale(amax);
    sf[b] = s;
    for (int64_t i = 0; i < kMxfp4Block; i += 2) {
      const uint8_t lo = recipe::mxfp4_index_quantize_value(load(b * 32 + i), s);
      const uint8_t hi = recipe::mxfp4_index_quantize_value(load(b * 32 + i + 1), s);
      codes[(b * 32 + i) / 2] = uint8_t(lo | (hi << 4));
    }
  }
}

// ------------------------------------------------------------------ NVFP4
// A key is D e2m1 codes and D/16 e4m3 block-scale bytes; value(d) = e2m1(code_d) *
// e4m3(sf_{d/16}) / g. The product of an e2m1 and an e4m3 value has at most 6 significant bits
// and lies in [2^-10, 2688] (or is 0 or NaN): exact in bf16 and fp32, and its products with an
// e4m3 q are multiples of 2^-19. The kernels repack these products and use k_scale = fl(1/g).
inline constexpr int kNvfp4Block = 16;

inline float nvfp4_relative_float(uint8_t code, uint8_t sf) {
  return e2m1_to_float(code) * e4m3_to_float(sf);
}
inline uint16_t nvfp4_relative_value(uint8_t code, uint8_t sf, uint16_t*) {
  return uint16_t(detail::float_bits(nvfp4_relative_float(code, sf)) >> 16);  // exact
}
inline float nvfp4_relative_value(uint8_t code, uint8_t sf, float*) {
  return nvfp4_relative_float(code, sf);
}
template <typename Out>
void decode_nvfp4_key(const uint8_t* codes, const uint8_t* sf, int D, Out* out) {
  for (int d = 0; d < D; ++d) {
    const uint8_t code = uint8_t((codes[d / 2] >> (4 * (d & 1))) & 0xF);
    out[d] = nvfp4_relative_value(code, sf[d / kNvfp4Block], out);
  }
}

// Either fp4 form.
template <typename Out>
void decode_fp4_key(bool nvfp4, const uint8_t* codes, const uint8_t* sf, int D, Out* out) {
  if (nvfp4) {
    decode_nvfp4_key(codes, sf, D, out);
  } else {
    decode_mxfp4_key(codes, sf, D, out);
  }
}

// The K store's NVFP4 quantisation of one row (the recipe of contract §5, blocks of 16).
template <typename Load>
void quantize_row_nvfp4(Load load, int64_t D, float global_scale, uint8_t* codes, uint8_t* sf) {
  for (int64_t b = 0; b < D / kNvfp4Block; ++b) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kNvfp4Block; ++i) amax = recipe::amax_update(amax, load(b * 16 + i));
    const recipe::Nvfp4BlockScale bs = recipe::nvfp4_block_scale(amax, global_scale);
    sf[b] = bs.sf_bits;
    for (int64_t i = 0; i < kNvfp4Block; i += 2) {
      const uint8_t lo = recipe::nvfp4_quantize_value(load(b * 16 + i), bs.out);
      const uint8_t hi = recipe::nvfp4_quantize_value(load(b * 16 + i + 1), bs.out);
      codes[(b * 16 + i) / 2] = uint8_t(lo | (hi << 4));
    }
  }
}

}  // namespace
}  // namespace quantkv::cpu
