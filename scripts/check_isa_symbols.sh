#!/usr/bin/env bash
# Fails when an ISA object file of the library (AVX2 / AVX-512 / AVX-512 + BF16 on x86-64; NEON,
# dotprod, BF16 on aarch64) defines any weak (COMDAT) function (nm type W: inline functions,
# template instances). The linker keeps one copy of each for the whole program; if it kept one
# compiled with AVX-512 flags, the scalar path, the tests or a user's code would execute AVX-512
# instructions on CPUs without them (or BF16 ones on an AVX-512 CPU without BF16). Helpers used
# by ISA files therefore have internal linkage (static / anonymous namespace). Weak data is the
# same bytes on every ISA and is allowed.
# Usage: scripts/check_isa_symbols.sh BUILD_DIR
set -euo pipefail
objdir="${1:?usage: $0 BUILD_DIR}/CMakeFiles/quantkv.dir"
mapfile -t isa < <(find "$objdir" -name '*_avx2.cpp.o' -o -name '*_avx512.cpp.o' \
  -o -name '*_avx512bf16.cpp.o' -o -name '*_neon*.cpp.o')
[ ${#isa[@]} -gt 0 ] || { echo "check_isa_symbols: no ISA objects under $objdir"; exit 1; }
weak=$(nm --defined-only "${isa[@]}" 2>/dev/null | awk '$2 == "W" {print $3}' | sort -u)
if [ -n "$weak" ]; then
  echo "ISA objects define weak functions (give them internal linkage):"
  echo "$weak" | c++filt
  exit 1
fi
echo "check_isa_symbols: ${#isa[@]} ISA objects define no weak function"
