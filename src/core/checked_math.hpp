// Overflow-checked integer arithmetic for sizes computed from caller values (extents, strides,
// byte counts). Each helper returns false instead of wrapping, so validation can name the
// argument whose size does not fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace quantkv::checked {

// *out = a * b; false when the product does not fit (no write then).
inline bool mul(int64_t a, int64_t b, int64_t* out) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}
inline bool add(int64_t a, int64_t b, int64_t* out) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

// *out = product of `n` non-negative factors; false when it overflows int64.
inline bool product(const int64_t* factors, int n, int64_t* out) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) {
    if (!mul(p, factors[i], &p)) return false;
  }
  *out = p;
  return true;
}

// The largest byte count any one buffer may have: what pointer differences can express.
inline constexpr int64_t kMaxBytes = PTRDIFF_MAX;

// *bytes = elements * element_size, false when it exceeds kMaxBytes.
inline bool bytes(int64_t elements, std::size_t element_size, int64_t* out) {
  int64_t r;
  if (!mul(elements, int64_t(element_size), &r) || r > kMaxBytes) return false;
  *out = r;
  return true;
}

}  // namespace quantkv::checked
