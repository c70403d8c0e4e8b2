// Non-owning strided tensor views and the validation helpers that produce the library's
// error messages ("q: expected rank 3 [T, H, D], got shape [5, 64]").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "quantkv/status.hpp"

namespace quantkv {

// A view of `Rank` dimensions over memory it does not own; strides are in elements.
template <typename T, int Rank>
struct TensorView {
  static_assert(Rank >= 1 && Rank <= 8, "TensorView supports ranks 1..8");
  using element_type = T;
  static constexpr int kRank = Rank;

  T* data = nullptr;
  std::array<int64_t, Rank> shape{};
  std::array<int64_t, Rank> strides{};

  int64_t size(int dim) const { return shape[dim]; }
  int64_t stride(int dim) const { return strides[dim]; }
  // Saturates at INT64_MAX when the extents' product overflows (validation rejects such views;
  // saturating keeps a wrapped product from ever reading as "empty").
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) {
      if (__builtin_mul_overflow(n, s, &n)) return INT64_MAX;
    }
    return n;
  }
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int d = Rank - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expected) return false;
      if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
    }
    return true;
  }

  template <typename... I>
  int64_t offset(I... idx) const {
    static_assert(sizeof...(I) == Rank, "one index per dimension");
    const int64_t index[] = {int64_t(idx)...};
    int64_t off = 0;
    for (int d = 0; d < Rank; ++d) off += index[d] * strides[d];
    return off;
  }
  template <typename... I>
  T& operator()(I... idx) const {
    return data[offset(idx...)];
  }

  // Read-only view of the same memory.
  operator TensorView<const T, Rank>() const
    requires(!std::is_const_v<T>)
  {
    return {data, shape, strides};
  }
};

// Row-major strides for `shape`.
template <int Rank>
std::array<int64_t, Rank> contiguous_strides(const std::array<int64_t, Rank>& shape) {
  std::array<int64_t, Rank> strides{};
  int64_t s = 1;
  for (int d = Rank - 1; d >= 0; --d) {
    strides[d] = s;
    // Saturates for shapes whose size overflows (validation then rejects the view).
    if (__builtin_mul_overflow(s, shape[d], &s)) s = INT64_MAX;
  }
  return strides;
}

// A contiguous (row-major) view: make_view(ptr, {T, H, D}).
template <typename T, std::size_t Rank>
TensorView<T, int(Rank)> make_view(T* data, const std::array<int64_t, Rank>& shape) {
  return {data, shape, contiguous_strides<int(Rank)>(shape)};
}
template <typename T, typename... S>
  requires(std::is_integral_v<S> && ...)
TensorView<T, sizeof...(S)> make_view(T* data, S... shape) {
  return make_view<T, sizeof...(S)>(data, std::array<int64_t, sizeof...(S)>{int64_t(shape)...});
}

// ----------------------------------------------------------------- validation
inline constexpr int64_t kAnyExtent = -1;

std::string format_shape(const int64_t* shape, int rank);

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
  const int64_t bytes = v.data == nullptr
                            ? 0
                            : detail::span_bytes(v.shape.data(), v.strides.data(), Rank, sizeof(T));
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
