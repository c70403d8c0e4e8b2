// The machine's own ceilings, measured in the same run as the kernels they judge, with the
// instructions of the active ISA level: peak bf16 dot-product rate (vdpbf16ps; f32 FMA on
// AVX2 and on AVX-512 without AVX512_BF16, where those kernels are the AVX2 ones), peak int8
// dot-product rate (vpdpbusd; pmaddubsw + paddw on AVX2), and the memory read bandwidth.
// Shared by bench/ (Google Benchmark) and `quantkv bench`.
#pragma once

namespace quantkv::ceilings {

struct Ceilings {
  double bf16_gflops = 0;  // 2 flops per bf16 multiply-add
  double int8_gops = 0;    // 2 ops per int8 multiply-add
  double read_gbs = 0;     // streaming read of a buffer far larger than the caches
};

// Each measurement runs for about `seconds` on `threads` threads and keeps the best of many
// short windows (the machines are shared and noisy; see ceilings.cpp).
double measure_bf16_dot_gflops(int threads, double seconds = 0.2);
double measure_int8_dot_gops(int threads, double seconds = 0.2);
double measure_read_gbs(int threads, double seconds = 0.3);
// Peak f32 FMA rate (2 flops per multiply-add) with the active level's widest vectors (f32
// multiply + add on the 128-bit baseline): the ceiling of fp32 kernels such as sparse MLA's.
double measure_f32_fma_gflops(int threads, double seconds = 0.2);
Ceilings measure_all(int threads, double seconds = 0.2);

}  // namespace quantkv::ceilings
