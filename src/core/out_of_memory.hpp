// Turns std::bad_alloc from the library's own allocations into a Status: the C++ API promises
// no exceptions. Every public entry point runs its body through catch_out_of_memory, and
// every op makes all its allocations (validation messages, metadata snapshot, workspace)
// before its parallel regions (an exception inside an OpenMP region would call
// std::terminate) and before its first write, so an error returned from here leaves the
// outputs untouched.
#pragma once

#include <new>
#include <string>

#include "quantkv/status.hpp"

namespace quantkv {

inline Status resource_exhausted(std::string message) {
  return {StatusCode::kResourceExhausted, std::move(message)};
}

// Runs `fn` (returning a Status); a std::bad_alloc becomes kResourceExhausted naming `what`.
template <typename Fn>
Status catch_out_of_memory(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    try {
      return resource_exhausted(std::string(what) +
                                ": out of memory (an allocation failed; nothing was written)");
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kResourceExhausted,
                    std::string());  // no memory for the message either
    }
  }
}

}  // namespace quantkv
