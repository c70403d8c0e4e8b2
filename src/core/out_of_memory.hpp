// Turns std::bad_alloc from the library's own allocations into a Status: the C++ API promises
// no exceptions. Every public entry point runs its body through catch_out_of_memory, and
// every op makes all its allocations (validation messages, metadata snapshot, workspace)
// before its parallel regions (an exception inside an OpenMP region would call
// std::terminate) and before its first write, so an error returned from here leaves the
// outputs untouched.
#pragma once

#include <new>
#include <string>
#include <utility>

#include "quantkv/context.hpp"
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

// The entry point of an operation that takes a Context: a negative ctx.num_threads is an
// error (include/quantkv/context.hpp) checked here, once for every op, before anything is read
// or written; then `fn` runs under catch_out_of_memory.
template <typename Fn>
Status run_entry_point(const char* what, const Context& ctx, Fn&& fn) {
  if (ctx.num_threads < 0) {
    return catch_out_of_memory(what, [&] {
      return invalid_argument("ctx.num_threads: expected >= 0 (0 = all available), got " +
                              std::to_string(ctx.num_threads));
    });
  }
  return catch_out_of_memory(what, std::forward<Fn>(fn));
}

}  // namespace quantkv
