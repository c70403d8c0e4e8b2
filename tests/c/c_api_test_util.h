/* Tiny check macros for the C11 tests of the C API: a failed check prints the expression,
 * the line and the library's last error message, and the test exits non-zero. */
#ifndef QUANTKV_C_API_TEST_UTIL_H_
#define QUANTKV_C_API_TEST_UTIL_H_

#include <stdio.h>
#include <string.h>

#include "quantkv/quantkv.h"

static int g_failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, #cond, \
              quantkv_last_error_message());                                                       \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)

/* The call must succeed. */
#define CHECK_OK(call) CHECK((call) == QUANTKV_OK)

/* The call must fail with `code` and a message containing `needle`. */
#define CHECK_FAILS(call, code, needle)                                                       \
  do {                                                                                        \
    quantkv_status_t st_ = (call);                                                            \
    if (st_ != (code) || strstr(quantkv_last_error_message(), (needle)) == NULL) {            \
      fprintf(stderr, "%s:%d: expected %s with \"%s\" from %s, got %s: \"%s\"\n", __FILE__,   \
              __LINE__, quantkv_status_name(code), (needle), #call, quantkv_status_name(st_), \
              quantkv_last_error_message());                                                  \
      ++g_failures;                                                                           \
    }                                                                                         \
  } while (0)

/* Fused-experts arguments with gpt-oss's activation (interleaved gate / up, SwiGLU-OAI with
 * alpha 1.702 and limit 7), weight-only, no biases. */
static inline quantkv_fused_experts_args_t gpt_oss_experts_args(
    const quantkv_tensor_t* x, const quantkv_tensor_t* topk_ids, const quantkv_tensor_t* weights,
    const quantkv_prepared_experts_t* ex, const quantkv_tensor_t* y) {
  quantkv_fused_experts_args_t a;
  memset(&a, 0, sizeof a);
  a.x = x;
  a.topk_ids = topk_ids;
  a.topk_weights = weights;
  a.experts = ex;
  a.gate_up = QUANTKV_GATE_UP_INTERLEAVED;
  a.activation = QUANTKV_MOE_SWIGLU_OAI;
  a.swiglu_alpha = 1.702f;
  a.swiglu_limit = 7.0f;
  a.y = y;
  return a;
}

static int finish_test(const char* name) {
  if (g_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, g_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

#endif /* QUANTKV_C_API_TEST_UTIL_H_ */
