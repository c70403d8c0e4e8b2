// Internal: a run-time count (rows of a register tile, heads of a head group) handed to a
// microkernel as a compile-time constant, so the drivers of every ISA file share one dispatch
// instead of a switch each. Header-only with internal linkage (anonymous namespace): ISA files
// include it, and a copy compiled with their flags must not reach the scalar path (see
// qkv_kernels.hpp and scripts/check_isa_symbols.sh).
#pragma once

#include <type_traits>

namespace quantkv::cpu {
namespace {

template <int N>
using StaticCount = std::integral_constant<int, N>;

// body(StaticCount<n>{}) for n in [1, kMax] (anything else runs N = 1).
template <int kMax, typename Body>
inline void with_static_count(int n, Body&& body) {
  static_assert(kMax >= 1);
  if constexpr (kMax > 1) {
    if (n == kMax) {
      body(StaticCount<kMax>{});
      return;
    }
    with_static_count<kMax - 1>(n, body);
  } else {
    body(StaticCount<1>{});
  }
}

// body(first, StaticCount<kGroup>{}) for the whole groups of [0, total), in ascending order,
// then body(first, StaticCount<total - first>{}) once for the remainder, if any.
template <int kGroup, typename Body>
inline void for_each_static_group(int total, Body&& body) {
  int first = 0;
  for (; first + kGroup <= total; first += kGroup) body(first, StaticCount<kGroup>{});
  if constexpr (kGroup > 1) {
    if (first < total)
      with_static_count<kGroup - 1>(total - first, [&](auto n) { body(first, n); });
  }
}

}  // namespace
}  // namespace quantkv::cpu
