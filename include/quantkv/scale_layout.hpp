// The 5-D swizzled block-scale layout of contract §4 (cuBLASLt / CUTLASS / TensorRT-LLM /
// FlashInfer): shape [ceil(R/128), ceil(Kb/4), 32, 4, 4]; row r, scale column kb sits at
// [r/128, kb/4, r%32, (r%128)/32, kb%4]. Padding entries are zero.
#pragma once

#include <array>
#include <cstdint>

#include "quantkv/formats.hpp"  // QUANTKV_HD
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// Flat offset of (row r, scale column kb) in a swizzled tensor with `kb_count` scale columns.
QUANTKV_HD int64_t swizzled_scale_offset(int64_t r, int64_t kb, int64_t kb_count) {
  const int64_t kb_tiles = (kb_count + 3) / 4;
  return (r / 128) * (kb_tiles * 512) + (kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
         kb % 4;
}

// [ceil(R/128), ceil(Kb/4), 32, 4, 4]
inline std::array<int64_t, 5> swizzled_scale_shape(int64_t rows, int64_t kb_count) {
  return {(rows + 127) / 128, (kb_count + 3) / 4, 32, 4, 4};
}
inline int64_t swizzled_scale_elements(int64_t rows, int64_t kb_count) {
  return ((rows + 127) / 128) * ((kb_count + 3) / 4) * 512;
}

// linear [R, Kb] (any strides) -> swizzled 5-D (contiguous; padding written as zeros).
Status linear_to_swizzled_scales(TensorView<const uint8_t, 2> linear,
                                 TensorView<uint8_t, 5> swizzled);
// swizzled 5-D (contiguous) -> linear [R, Kb] (any strides); padding is not read.
Status swizzled_to_linear_scales(TensorView<const uint8_t, 5> swizzled,
                                 TensorView<uint8_t, 2> linear);

}  // namespace quantkv
