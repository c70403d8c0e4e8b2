#!/usr/bin/env bash
# Fails when an AVX2 / AVX-512 object file of the library defines a weak (COMDAT) function that a
# baseline object also defines (nm type W; weak data is the same bytes on every ISA): the linker
# keeps one copy, and if it keeps the one compiled with
# AVX-512 flags, the scalar path would execute AVX-512 instructions on CPUs without them.
# Usage: scripts/check_isa_symbols.sh BUILD_DIR
set -euo pipefail
objdir="${1:?usage: $0 BUILD_DIR}/CMakeFiles/quantkv.dir"
mapfile -t isa < <(find "$objdir" -name '*_avx2.cpp.o' -o -name '*_avx512.cpp.o')
mapfile -t base < <(find "$objdir" -name '*.o' ! -name '*_avx2.cpp.o' ! -name '*_avx512.cpp.o')
weak() { nm --defined-only "$@" 2>/dev/null | awk '$2 == "W" {print $3}' | sort -u; }
shared=$(comm -12 <(weak "${isa[@]}") <(weak "${base[@]}"))
if [ -n "$shared" ]; then
  echo "ISA objects share weak symbols with baseline objects (give them internal linkage):"
  echo "$shared" | c++filt
  exit 1
fi
echo "check_isa_symbols: ${#isa[@]} ISA objects share no weak symbol with ${#base[@]} baseline objects"
