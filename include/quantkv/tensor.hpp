// Non-owning strided tensor views and the validation helpers that produce the library's
// error messages ("q: expected rank 3 [T, H, D], got shape [5, 64]").
#pragma once

#include <array>
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
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int d = Rank - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expected) return false;
      expected *= shape[d];
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
    s *= shape[d];
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
// `expected` (kAnyExtent = anything). `dims` names the dimensions, e.g. "[T, H, D]".
Status check_view(const char* name, const char* dims, const void* data, const int64_t* shape,
                  const int64_t* strides, int rank, const int64_t* expected,
                  bool require_contiguous);
}  // namespace detail

// Validates a view against an expected shape, naming the argument in the error:
//   check_shape("q", "[T, H, D]", q, {T, kAnyExtent, kAnyExtent})
// Checks: non-null data when non-empty, extents >= 0, expected extents, strides >= 0.
template <typename T, int Rank>
Status check_shape(const char* name, const char* dims, const TensorView<T, Rank>& v,
                   const std::array<int64_t, Rank>& expected) {
  return detail::check_view(name, dims, v.data, v.shape.data(), v.strides.data(), Rank,
                            expected.data(), /*require_contiguous=*/false);
}
// As check_shape, and the innermost dimension must have stride 1 and the view be row-major
// contiguous (kernels that stream rows need it).
template <typename T, int Rank>
Status check_contiguous(const char* name, const char* dims, const TensorView<T, Rank>& v,
                        const std::array<int64_t, Rank>& expected) {
  return detail::check_view(name, dims, v.data, v.shape.data(), v.strides.data(), Rank,
                            expected.data(), /*require_contiguous=*/true);
}

}  // namespace quantkv
