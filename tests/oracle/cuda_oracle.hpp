// CUDA's host-side conversions, wrapped as plain functions: the codec test oracle.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

namespace quantkv::oracle {

inline uint8_t e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
inline uint8_t e2m1(float x) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); }
inline uint8_t e8m0(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); }
inline uint16_t bf16(float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}
inline uint16_t fp16(float x) {
  const __half h = __float2half_rn(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float half_raw_to_float(__half_raw r) { return __half2float(__half(r)); }
inline float e4m3_decode(uint8_t c) {
  return half_raw_to_float(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3));
}
inline float e2m1_decode(uint8_t c) {
  return half_raw_to_float(__nv_cvt_fp4_to_halfraw(c, __NV_E2M1));
}
inline float e8m0_decode(uint8_t c) {
  const __nv_bfloat16_raw r = __nv_cvt_e8m0_to_bf16raw(c);
  uint32_t u = uint32_t(r.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float fp16_decode(uint16_t h) {
  __half_raw r;
  r.x = h;
  return half_raw_to_float(r);
}

}  // namespace quantkv::oracle
