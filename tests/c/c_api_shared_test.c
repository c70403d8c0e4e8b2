/* libquantkv.so from C: linked against the shared library only (the C++ library's symbols are
 * not visible through it), the version, a status message, and the swizzled scale shape helper
 * on counts below, at and above its blocks (128 rows, 4 scale columns) and on bad arguments. */
#include <stdio.h>
#include <string.h>

#include "quantkv/quantkv.h"

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static void expect_shape(int64_t rows, int64_t kb, int64_t r0, int64_t k0) {
  int64_t shape[5] = {-1, -1, -1, -1, -1};
  CHECK(quantkv_swizzled_scale_shape(rows, kb, shape) == QUANTKV_OK);
  CHECK(shape[0] == r0 && shape[1] == k0 && shape[2] == 32 && shape[3] == 4 && shape[4] == 4);
  CHECK(shape[0] * shape[1] * 512 == quantkv_swizzled_scale_elements(rows, kb));
}

int main(void) {
  int64_t shape[5] = {7, 7, 7, 7, 7};
  CHECK(strcmp(quantkv_version_string(), "") != 0);
  expect_shape(0, 0, 0, 0);
  expect_shape(1, 1, 1, 1);
  expect_shape(128, 4, 1, 1);
  expect_shape(129, 5, 2, 2);
  expect_shape(300, 16, 3, 4);
  CHECK(quantkv_swizzled_scale_shape(-1, 4, shape) == QUANTKV_INVALID_ARGUMENT);
  CHECK(strstr(quantkv_last_error_message(), "rows, kb_count") != NULL);
  CHECK(shape[0] == 7 && shape[4] == 7);
  CHECK(quantkv_swizzled_scale_shape(1, 1, NULL) == QUANTKV_INVALID_ARGUMENT);
  CHECK(strstr(quantkv_last_error_message(), "shape") != NULL);
  if (failures == 0) printf("c_api_shared_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
