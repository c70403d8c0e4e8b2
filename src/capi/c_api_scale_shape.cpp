// The C API (include/quantkv/quantkv.h): the swizzled scale shape for (rows, Kb), so that C
// callers size the 5-D scale tensors without repeating the layout's arithmetic.
#include <string>

#include "c_api_internal.hpp"
#include "quantkv/quantkv.h"
#include "quantkv/scale_layout.hpp"

quantkv_status_t quantkv_swizzled_scale_shape(int64_t rows, int64_t kb_count, int64_t shape[5]) {
  return quantkv::capi::guarded([&]() -> quantkv::Status {
    if (shape == nullptr)
      return {quantkv::StatusCode::kInvalidArgument, "shape: expected non-null"};
    if (rows < 0 || kb_count < 0) {
      return {quantkv::StatusCode::kInvalidArgument, "rows, kb_count: expected >= 0, got " +
                                                         std::to_string(rows) + ", " +
                                                         std::to_string(kb_count)};
    }
    const auto s = quantkv::swizzled_scale_shape(rows, kb_count);
    for (int d = 0; d < 5; ++d) shape[d] = s[d];
    return quantkv::Status::Ok();
  });
}
