# Cross build for 64-bit ARM Linux (NVIDIA Grace, AWS Graviton) on a Debian x86-64 host:
#   scripts/install-deps.sh --aarch64 && cmake --preset aarch64-cross && cmake --build build/aarch64
# Uses Debian's cross compiler (g++-aarch64-linux-gnu) and the arm64 multiarch packages
# (libgtest-dev:arm64, ...) under /usr/lib/aarch64-linux-gnu; the test binaries run under
# qemu-user, which CMake and CTest call through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: libraries and CMake packages of the target live in lib/aarch64-linux-gnu
# (no separate sysroot), so the default search paths are kept and only the architecture is set.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# The emulated CPU: `max` has every extension qemu knows (dotprod, i8mm, bf16, SVE), so the
# tests can force and check each aarch64 kernel level; -DQUANTKV_QEMU_CPU=cortex-a57 emulates a
# plain ARMv8.0 NEON machine instead (the best level found at run time drops accordingly).
set(QUANTKV_QEMU_CPU max CACHE STRING "CPU model qemu-aarch64 emulates for the tests")
find_program(QUANTKV_QEMU_AARCH64 qemu-aarch64)
if(QUANTKV_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR
      ${QUANTKV_QEMU_AARCH64};-L;/usr/aarch64-linux-gnu;-cpu;${QUANTKV_QEMU_CPU})
endif()
