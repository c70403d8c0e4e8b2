// Linear [R, Kb] <-> 5-D swizzled block scales (contract §4).
#include "quantkv/scale_layout.hpp"

#include <algorithm>
#include <string>

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"

namespace quantkv {

namespace {
Status check_pair(const int64_t* swizzled_shape, int64_t rows, int64_t kb_count,
                  const char* swizzled_name) {
  const auto want = swizzled_scale_shape(rows, kb_count);
  for (int d = 0; d < 5; ++d) {
    if (swizzled_shape[d] != want[d]) {
      return invalid_argument(std::string(swizzled_name) + ": expected shape " +
                              format_shape(want.data(), 5) + " for R = " + std::to_string(rows) +
                              ", Kb = " + std::to_string(kb_count) + ", got shape " +
                              format_shape(swizzled_shape, 5));
    }
  }
  return Status::Ok();
}

// The checks both directions share: linear [R, Kb], swizzled the contiguous 5-D tensor of
// R x Kb scales.
template <typename Linear, typename Swizzled>
Status check_layouts(const Linear& linear, const Swizzled& swizzled) {
  QUANTKV_RETURN_IF_ERROR(check_shape("linear", "[R, Kb]", linear, {kAnyExtent, kAnyExtent}));
  QUANTKV_RETURN_IF_ERROR(
      check_pair(swizzled.shape.data(), linear.shape[0], linear.shape[1], "swizzled"));
  QUANTKV_RETURN_IF_ERROR(check_contiguous("swizzled", "[R/128, Kb/4, 32, 4, 4]", swizzled,
                                           {kAnyExtent, kAnyExtent, 32, 4, 4}));
  return Status::Ok();
}

Status to_swizzled(TensorView<const uint8_t, 2> linear, TensorView<uint8_t, 5> swizzled) {
  QUANTKV_RETURN_IF_ERROR(check_layouts(linear, swizzled));
  const int64_t rows = linear.shape[0], kb_count = linear.shape[1];
  QUANTKV_RETURN_IF_ERROR(
      check_no_overlap(memory_range("swizzled", swizzled), {memory_range("linear", linear)}));
  std::fill_n(swizzled.data, swizzled.numel(), uint8_t{0});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      swizzled.data[swizzled_scale_offset(r, kb, kb_count)] = linear(r, kb);
    }
  }
  return Status::Ok();
}

Status to_linear(TensorView<const uint8_t, 5> swizzled, TensorView<uint8_t, 2> linear) {
  QUANTKV_RETURN_IF_ERROR(check_layouts(linear, swizzled));
  const int64_t rows = linear.shape[0], kb_count = linear.shape[1];
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("linear", linear));
  QUANTKV_RETURN_IF_ERROR(
      check_no_overlap(memory_range("linear", linear), {memory_range("swizzled", swizzled)}));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      linear(r, kb) = swizzled.data[swizzled_scale_offset(r, kb, kb_count)];
    }
  }
  return Status::Ok();
}

}  // namespace

Status linear_to_swizzled_scales(TensorView<const uint8_t, 2> linear,
                                 TensorView<uint8_t, 5> swizzled) {
  return catch_out_of_memory("linear_to_swizzled_scales",
                             [&] { return to_swizzled(linear, swizzled); });
}

Status swizzled_to_linear_scales(TensorView<const uint8_t, 5> swizzled,
                                 TensorView<uint8_t, 2> linear) {
  return catch_out_of_memory("swizzled_to_linear_scales",
                             [&] { return to_linear(swizzled, linear); });
}

}  // namespace quantkv
