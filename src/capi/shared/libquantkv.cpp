// libquantkv.so, the C API as a shared library for other languages, is the static library
// linked whole under the export list src/capi/quantkv.map; this file only gives CMake's
// shared-library target a source of its own.
