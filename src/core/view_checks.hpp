// Internal: the validation helpers that produce the library's error messages for views
// ("q: expected rank 3 [T, H, D], got shape [5, 64]") and its aliasing checks. Not installed:
// the public headers hold only the API (docs/architecture.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

inline constexpr int64_t kAnyExtent = -1;

namespace detail {
// Checks non-null data (unless empty), non-negative extents, and each extent against
// `expected` (kAnyExtent = anything). `dims` names the dimensions, e.g. "[T, H, D]". The
// element count, every stride x (extent - 1) and the bytes the view spans must fit in int64
// (and in PTRDIFF_MAX bytes), so no later size computation can wrap.
Status check_view(const char* name, const char* dims, const void* data, const int64_t* shape,
                  const int64_t* strides, int rank, const int64_t* expected,
                  bool require_contiguous, std::size_t element_size);
// Checks that no two elements of a (validated) view share memory: stride 0 along an extent
// > 1, or rows closer than a row's span, would make writes overwrite each other.
Status check_distinct_elements(const char* name, const int64_t* shape, const int64_t* strides,
                               int rank);
// Bytes a validated view spans from its data pointer: 0 when empty, else
// (sum over d of (shape[d] - 1) * strides[d] + 1) * element_size.
int64_t span_bytes(const int64_t* shape, const int64_t* strides, int rank,
                   std::size_t element_size);
}  // namespace detail

// Validates a view against an expected shape, naming the argument in the error:
//   check_shape("q", "[T, H, D]", q, {T, kAnyExtent, kAnyExtent})
// Checks: non-null data when non-empty, extents >= 0, expected extents, strides >= 0.
template <typename T, int Rank>
Status check_shape(const char* name, const char* dims, const TensorView<T, Rank>& v,
                   const std::array<int64_t, Rank>& expected) {
  return detail::check_view(name, dims, v.data, v.shape.data(), v.strides.data(), Rank,
                            expected.data(), /*require_contiguous=*/false, sizeof(T));
}
// As check_shape, and the innermost dimension must have stride 1 and the view be row-major
// contiguous (kernels that stream rows need it).
template <typename T, int Rank>
Status check_contiguous(const char* name, const char* dims, const TensorView<T, Rank>& v,
                        const std::array<int64_t, Rank>& expected) {
  return detail::check_view(name, dims, v.data, v.shape.data(), v.strides.data(), Rank,
                            expected.data(), /*require_contiguous=*/true, sizeof(T));
}

// Whether an optional view was given: a data pointer or any extent (an M = 0 view of K columns
// counts as given). The one-call argument structs leave the parts they do not use empty.
template <typename T, int Rank>
bool given(const TensorView<T, Rank>& v) {
  if (v.data != nullptr) return true;
  for (int d = 0; d < Rank; ++d) {
    if (v.shape[d] != 0) return true;
  }
  return false;
}

// For outputs, after check_shape: every element has its own memory (no stride-0 rows, no
// overlapping rows), so no write overwrites another.
template <typename T, int Rank>
Status check_distinct_elements(const char* name, const TensorView<T, Rank>& v) {
  return detail::check_distinct_elements(name, v.shape.data(), v.strides.data(), Rank);
}

// --------------------------------------------------------------- aliasing
// The bytes [begin, end) a buffer spans; empty (begin == end) for empty views.
struct MemoryRange {
  const char* name = "";
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};
template <typename T, int Rank>
MemoryRange memory_range(const char* name, const TensorView<T, Rank>& v) {
  const int64_t bytes =
      v.data == nullptr ? 0 : detail::span_bytes(v.shape.data(), v.strides.data(), Rank, sizeof(T));
  const auto begin = reinterpret_cast<std::uintptr_t>(v.data);
  return {name, begin, begin + std::uintptr_t(bytes)};
}
inline MemoryRange memory_range(const char* name, const void* data, int64_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  return {name, begin, data == nullptr ? begin : begin + std::uintptr_t(bytes)};
}

// Fails (invalid argument, naming both) when the written range overlaps any of the ranges
// the call reads or also writes: a kernel may read an input after it wrote part of an output.
Status check_no_overlap(const MemoryRange& written, std::initializer_list<MemoryRange> others);

}  // namespace quantkv
