// glibc's own allocator entry points, for test executables that replace the malloc family
// with wrappers around them (counting, or failing on request).
#pragma once

#include <cstddef>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
}
