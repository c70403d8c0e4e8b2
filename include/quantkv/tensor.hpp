// Non-owning strided tensor views. (The validation helpers behind the library's error
// messages, "q: expected rank 3 [T, H, D], got shape [5, 64]", are internal:
// src/core/view_checks.hpp.)
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
  operator TensorView<const T, Rank>() const requires(!std::is_const_v<T>) {
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
requires(std::is_integral_v<S>&&...) TensorView<T, sizeof...(S)> make_view(T* data, S... shape) {
  return make_view<T, sizeof...(S)>(data, std::array<int64_t, sizeof...(S)>{int64_t(shape)...});
}

// "[5, 64]": the shape as the library's error messages print it.
std::string format_shape(const int64_t* shape, int rank);

}  // namespace quantkv
