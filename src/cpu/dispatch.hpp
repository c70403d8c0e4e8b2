// Internal: which ISA variants this build contains. The AVX2 / AVX-512 translation units are
// compiled only for x86-64 (CMake sets QUANTKV_X86_KERNELS); elsewhere the scalar path runs.
#pragma once

#include "quantkv/cpu_features.hpp"

#if defined(QUANTKV_X86_KERNELS)
#define QUANTKV_AVX2_OR_NULL(fn) (fn)
#define QUANTKV_AVX512_OR_NULL(fn) (fn)
#else
#define QUANTKV_AVX2_OR_NULL(fn) nullptr
#define QUANTKV_AVX512_OR_NULL(fn) nullptr
#endif
