/* The checkpoint loaders and the weight-only fused QKV from C: a hand-written MXFP4 q/k/v
 * checkpoint (K = 32, 4 rows per shard, every block scale 1), loaded and run on bf16
 * activations whose products are exact: c[m][n] = 32 * a_m * b_n; the same rows as one fused
 * qkv_proj, and sharded over two files with an index. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_api_test_util.h"

/* Writes projections first .. first + count - 1 of q, k, v (4 rows each; row n of the layer
 * has value b[n]) as L.<x>_proj tensors, or all 12 rows as one fused L.qkv_proj. */
static int write_checkpoint(const char* path, const float b[12], int first, int count, int fused) {
  char header[1024] = "{";
  size_t offset = 0;
  const char* shards[3] = {"q", "k", "v"};
  const int tensors = fused ? 1 : count, rows = fused ? 12 : 4;
  for (int s = 0; s < tensors; ++s) {
    char entry[256];
    char name[16];
    snprintf(name, sizeof name, "%s", fused ? "qkv" : shards[first + s]);
    snprintf(entry, sizeof entry,
             "%s\"L.%s_proj.weight_blocks\":{\"dtype\":\"U8\",\"shape\":[%d,1,16],\"data_offsets\":"
             "[%zu,%zu]},"
             "\"L.%s_proj.weight_scales\":{\"dtype\":\"U8\",\"shape\":[%d,1],\"data_offsets\":[%zu,"
             "%zu]}",
             s ? "," : "", name, rows, offset, offset + 16 * rows, name, rows, offset + 16 * rows,
             offset + 17 * rows);
    strcat(header, entry);
    offset += 17 * (size_t)rows;
  }
  strcat(header, "}");
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  const uint64_t len = strlen(header);
  for (int i = 0; i < 8; ++i) fputc((int)((len >> (8 * i)) & 0xFF), f);
  fwrite(header, 1, len, f);
  for (int s = 0; s < tensors; ++s) {
    const int row0 = fused ? 0 : (first + s) * 4;
    for (int r = 0; r < rows; ++r) {
      uint8_t row[16];
      memset(row, quantkv_float_to_e2m1(b[row0 + r]) * 0x11, 16);
      fwrite(row, 1, 16, f);
    }
    for (int r = 0; r < rows; ++r) fputc(127, f); /* e8m0 1.0 */
  }
  fclose(f);
  return 1;
}

/* Runs the weight-only projection on `w` and checks every output against the exact value. */
static void check_outputs(const quantkv_prepared_qkv_weights_t* w, const float b[12]) {
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.dtype = QUANTKV_DTYPE_F32;
  cfg.num_blocks = 1;
  cfg.page_size = 4;
  cfg.head_size = 4;
  quantkv_cache_t* cache = NULL;
  CHECK_OK(quantkv_cache_create(&cfg, 1, &cache));
  CHECK_OK(quantkv_cache_reserve(cache, 0, 2));
  quantkv_paged_kv_t view;
  CHECK_OK(quantkv_cache_view(cache, &view));
  const float a[2] = {0.75f, -2.5f};
  uint16_t hidden[2][32], out[2][4];
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 32; ++i) hidden[m][i] = quantkv_float_to_bf16(a[m]);
  uint32_t offs[2] = {0, 2};
  const int64_t hs[2] = {2, 32}, os[2] = {2, 4}, offs_shape[1] = {2};
  quantkv_tensor_t ht = quantkv_tensor_contiguous(hidden, QUANTKV_DTYPE_BF16, 2, hs);
  quantkv_tensor_t outt = quantkv_tensor_contiguous(out, QUANTKV_DTYPE_BF16, 2, os);
  quantkv_tensor_t ot = quantkv_tensor_contiguous(offs, QUANTKV_DTYPE_U32, 1, offs_shape);
  const quantkv_section_scales_t sf = {1.0f, 0.5f, 2.0f};
  CHECK_OK(quantkv_fused_qkv_matmul_weight_only(&ht, &ot, w, sf, &view, 0, &outt, NULL));
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 12; ++n) {
      const float c = 32.0f * a[m] * b[n];
      if (n < 4) {
        CHECK(out[m][n] == quantkv_float_to_bf16(c));
        continue;
      }
      float stored = 0.0f;
      CHECK_OK(quantkv_cache_get(cache, 0, m, (n - 4) / 4, 0, 0, (n - 4) % 4, &stored));
      CHECK(stored == c * (n < 8 ? 0.5f : 2.0f));
    }
  }
  CHECK_FAILS(quantkv_fused_qkv_matmul_weight_only(&ht, &ot, NULL, sf, &view, 0, &outt, NULL),
              QUANTKV_INVALID_ARGUMENT, "weight: prepared weights pointer is null");
  quantkv_cache_destroy(cache);
}

/* After a load that returned `status` into *w and *info: checks the info and the outputs
 * (*w is read here, after the call, whatever the order of the caller's argument evaluation). */
static void check_loaded(quantkv_status_t status, quantkv_prepared_qkv_weights_t** wp,
                         const quantkv_qkv_checkpoint_info_t* info, const float b[12]) {
  CHECK_OK(status);
  if (status != QUANTKV_OK) return;
  quantkv_prepared_qkv_weights_t* w = *wp;
  *wp = NULL;
  CHECK(info->format == QUANTKV_CHECKPOINT_MXFP4);
  CHECK(info->q_rows == 4 && info->k_rows == 4 && info->v_rows == 4);
  CHECK(info->weight_factor.q == 1.0f && info->input_global == 1.0f);
  check_outputs(w, b);
  quantkv_prepared_qkv_weights_destroy(w);
}

/* A sharded checkpoint in a fresh directory: q in a.safetensors, k and v in b.safetensors,
 * and model.safetensors.index.json; returns the directory (static storage). */
static const char* write_sharded(const float b[12]) {
  static char dir[] = "/tmp/quantkv_c_shards_XXXXXX";
  static char path[128];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  CHECK(write_checkpoint(path, b, 0, 1, 0));
  snprintf(path, sizeof path, "%s/b.safetensors", dir);
  CHECK(write_checkpoint(path, b, 1, 2, 0));
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(
        "{\"metadata\": {\"total_size\": 204}, \"weight_map\": {"
        "\"L.q_proj.weight_blocks\": \"a.safetensors\", \"L.q_proj.weight_scales\": "
        "\"a.safetensors\", "
        "\"L.k_proj.weight_blocks\": \"b.safetensors\", \"L.k_proj.weight_scales\": "
        "\"b.safetensors\", "
        "\"L.v_proj.weight_blocks\": \"b.safetensors\", \"L.v_proj.weight_scales\": "
        "\"b.safetensors\"}}",
        f);
    fclose(f);
  }
  return dir;
}

static void remove_sharded(const char* dir) {
  const char* names[3] = {"a.safetensors", "b.safetensors", "model.safetensors.index.json"};
  char path[128];
  for (int i = 0; i < 3; ++i) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    remove(path);
  }
  rmdir(dir);
}

int main(void) {
  char path[] = "/tmp/quantkv_c_ckpt_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  float b[12];
  for (int n = 0; n < 12; ++n) b[n] = (n % 3 == 0) ? -1.0f : (float)(n % 4) * 0.5f;
  CHECK(write_checkpoint(path, b, 0, 3, 0));

  quantkv_prepared_qkv_weights_t* w = NULL;
  quantkv_qkv_checkpoint_info_t info;
  /* One file, then the same rows as one fused qkv_proj, then sharded over two files. */
  check_loaded(quantkv_load_qkv_checkpoint(path, "L", NULL, &w, &info), &w, &info, b);
  CHECK(write_checkpoint(path, b, 0, 3, 1));
  w = NULL;
  check_loaded(quantkv_load_fused_qkv_checkpoint(path, "L.qkv_proj", 4, 4, 4, NULL, &w, &info), &w,
               &info, b);
  w = NULL;
  CHECK_FAILS(quantkv_load_fused_qkv_checkpoint(path, "L.qkv_proj", 4, 4, 5, NULL, &w, &info),
              QUANTKV_INVALID_ARGUMENT,
              "sections: expected q + k + v = N = 12 rows of 'L.qkv_proj'");
  CHECK(w == NULL);
  CHECK_FAILS(quantkv_load_fused_qkv_checkpoint(path, NULL, 4, 4, 4, NULL, &w, &info),
              QUANTKV_INVALID_ARGUMENT, "projection: pointer is null");
  const char* dir = write_sharded(b);
  check_loaded(quantkv_load_qkv_checkpoint(dir, "L", NULL, &w, &info), &w, &info, b);
  remove_sharded(dir);
  CHECK(write_checkpoint(path, b, 0, 3, 0));

  w = NULL;
  CHECK_FAILS(quantkv_load_qkv_checkpoint(path, "M", NULL, &w, &info), QUANTKV_INVALID_ARGUMENT,
              "projection 'M.q_proj': no quantised weight");
  CHECK(w == NULL);
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs("\x06", f); /* header length 6 (then 7 zero bytes) and "[1, 2]" is not an object */
    for (int i = 0; i < 7; ++i) fputc(0, f);
    fputs("[1, 2]", f);
    fclose(f);
  }
  CHECK_FAILS(quantkv_load_qkv_checkpoint(path, "L", NULL, &w, &info), QUANTKV_INVALID_ARGUMENT,
              "header is not a JSON object");
  CHECK_FAILS(quantkv_load_qkv_checkpoint(NULL, "L", NULL, &w, &info), QUANTKV_INVALID_ARGUMENT,
              "path: pointer is null");
  remove(path);
  return finish_test("c_api_checkpoint_test");
}
