// The chain-count macro of the AVX-512 peak-rate loops (ceilings_avx512.cpp and, for
// vdpbf16ps, ceilings_avx512bf16.cpp). Include it only from those files.
#pragma once

// Applies `step` to chains x0..x(N-1) (N: 8, 12 or 16, a constant of the caller) in one
// iteration.
#define QUANTKV_CEILING_CHAINS(step) \
  step(x0);                          \
  step(x1);                          \
  step(x2);                          \
  step(x3);                          \
  step(x4);                          \
  step(x5);                          \
  step(x6);                          \
  step(x7);                          \
  if constexpr (N > 8) {             \
    step(x8);                        \
    step(x9);                        \
    step(x10);                       \
    step(x11);                       \
  }                                  \
  if constexpr (N > 12) {            \
    step(x12);                       \
    step(x13);                       \
    step(x14);                       \
    step(x15);                       \
  }
