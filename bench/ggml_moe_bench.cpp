// quantkv's fused experts beside ggml's MUL_MAT_ID path (what llama.cpp runs on a CPU), in one
// process, on the layers, weights, routings and input of bench/moe_layers.hpp (issue #28;
// docs/moe.md, "Side by side: ggml and torch"). Built only when CMake is given a ggml build
// (-DQUANTKV_GGML_DIR=..., see bench/CMakeLists.txt); not part of quantkv_bench.
//
// ggml runs the graph llama.cpp's build_moe_ffn builds for these layers: ggml_mul_mat_id for up,
// gate and down (separate gate and up expert tensors, as GGUF files hold them: the same bytes as
// quantkv's stacked w13, regrouped into ggml's blocks), the per-expert scale2 of an NVFP4
// checkpoint (Qwen3: ggml_get_rows of the [E] vector, ggml_mul) or the biases (gpt-oss:
// ggml_add_id), ggml_swiglu_oai (alpha 1.702, limit 7) or ggml_swiglu_split, the router weights
// (ggml_mul) and the sum over the k slots (ggml_add of views); F32 activations, which ggml
// quantises to Q8_0 itself for the MXFP4 / NVFP4 dot products. quantkv runs fused_experts
// w4a16 and w4a4 as bench/moe_bench.cpp does.
//
// Weights placed two ways: `plain` (the CPU backend's buffer) and `repack` (the CPU backend's
// extra buffer type CPU_REPACK, which llama.cpp uses by default where it supports the weight's
// type; where it does not, llama.cpp keeps the weight in the plain buffer and so does this line).
// The other extra buffer type of an x86 build, AMX, takes neither MXFP4 nor NVFP4 (nor
// MUL_MAT_ID) at d99724f2, so llama.cpp would not place these weights there.
// Copies of every layout (default 3) and the 16 routings are rotated call by call, as in
// moe_bench. Timing: one warm-up call, then the mean over at least --min-time seconds and 2
// calls. ggml runs on one persistent ggml_threadpool per thread count.
//
// Sanity check: `diff` is max |y - y_ref| / max |y_ref| over the warm-up call's output (routing
// 0, copy 0), y_ref quantkv w4a16's (bf16 output). The paths round activations differently
// (bf16, Q8_0, NVFP4 / MXFP4), so only a loose agreement is expected (a few percent); a wrong
// layout gives about 1 or more. quantkv w4a4's diff is large here (0.4-0.7): its activation
// global scales are moe_layers.hpp's fixed ones, not calibrated to these random weights, so that
// figure is no measure of w4a4's accuracy (the tests are: docs/moe.md).
//
// Usage: quantkv_ggml_moe_bench [--threads 1,2] [--tokens 1,16,512] [--min-time 0.5]
//                               [--copies 3] [--layers gpt_oss_20b,qwen3_30b_a3b]
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe_layers.hpp"
#include "quantkv/moe.hpp"

namespace {

using moe_layers::MoeModel;
using moe_layers::RawExperts;
using moe_layers::Routing;
using quantkv::BlockFormat;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "ggml_moe_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Options {
  std::vector<int> threads{1, 2};
  std::vector<int64_t> tokens{1, 16, 512};
  std::vector<std::string> layers{moe_layers::kGptOss20B.name, moe_layers::kQwen3A3B.name};
  double min_time = 0.5;
  int copies = 3;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: %s [--threads 1,2] [--tokens 1,16,512] [--min-time 0.5] [--copies 3] "
          "[--layers gpt_oss_20b,qwen3_30b_a3b]\n",
          argv[0]);
      std::exit(0);
    }
    if (i + 1 >= argc) die("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--threads") {
      o.threads.clear();
      for (const auto& v : split(value)) o.threads.push_back(std::stoi(v));
    } else if (flag == "--tokens") {
      o.tokens.clear();
      for (const auto& v : split(value)) o.tokens.push_back(std::stoll(v));
    } else if (flag == "--layers") {
      o.layers = split(value);
    } else if (flag == "--min-time") {
      o.min_time = std::stod(value);
    } else if (flag == "--copies") {
      o.copies = std::stoi(value);
    } else {
      die("unknown flag " + flag);
    }
  }
  if (o.copies < 1) die("--copies must be at least 1");
  for (int t : o.threads)
    if (t < 1) die("--threads must be positive");
  for (int64_t t : o.tokens)
    if (t < 1) die("--tokens must be positive");
  return o;
}

// The first processor's model name in /proc/cpuinfo, with its family and model (a VM may name
// only the brand).
std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", family, model;
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = line.substr(std::min(colon + 2, line.size()));
    if (line.rfind("model name", 0) == 0) name = value;
    if (line.rfind("cpu family", 0) == 0) family = value;
    if (line.rfind("model\t", 0) == 0) model = value;
  }
  if (!family.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

// One warm-up call (call index 0), then calls 1, 2, ... until at least min_time seconds and two
// calls have passed; the mean milliseconds per call.
double mean_ms(const std::function<void(std::size_t)>& call, double min_time, int* calls) {
  call(0);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  std::size_t n = 0;
  double elapsed = 0;
  do {
    call(++n);
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < min_time || n < 2);
  *calls = int(n);
  return elapsed * 1e3 / double(n);
}

double max_rel_diff(const std::vector<float>& y, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, double(std::fabs(y[i] - ref[i])));
    scale = std::max(scale, double(std::fabs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// ------------------------------------------------------------------ quantkv's layout to ggml's

ggml_type ggml_type_of(BlockFormat f) {
  switch (f) {
    case BlockFormat::kMXFP4:
      return GGML_TYPE_MXFP4;
    case BlockFormat::kNVFP4:
      return GGML_TYPE_NVFP4;
    default:
      die("only MXFP4 and NVFP4 layers are compared");
  }
}

// The e2m1 code of element k of a quantkv row (element 2c in the low nibble of byte c).
uint8_t code_at(const uint8_t* codes, int64_t k) {
  return uint8_t((codes[k / 2] >> (4 * (k & 1))) & 0xF);
}

// One row of n elements (quantkv's codes and its row of block scales) as ggml blocks:
// block_mxfp4 {e8m0 e; qs[16]: element j low, j + 16 high}, 32 elements;
// block_nvfp4 {ue4m3 d[4]; qs[32]: sub-block s's elements j low, j + 8 high in qs[8s + j]},
// 64 elements. ggml's e2m1 table holds 2x the values and both scale decoders 0.5x, so the
// dequantised values are quantkv's.
void to_ggml_row(BlockFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n,
                 uint8_t* out) {
  if (f == BlockFormat::kMXFP4) {
    for (int64_t b = 0; b < n / 32; ++b, out += 17) {
      out[0] = scales[b];
      for (int64_t j = 0; j < 16; ++j)
        out[1 + j] = uint8_t(code_at(codes, 32 * b + j) | code_at(codes, 32 * b + j + 16) << 4);
    }
    return;
  }
  for (int64_t b = 0; b < n / 64; ++b, out += 36) {
    for (int64_t s = 0; s < 4; ++s) {
      out[s] = scales[4 * b + s];
      const int64_t first = 64 * b + 16 * s;
      for (int64_t j = 0; j < 8; ++j)
        out[4 + 8 * s + j] =
            uint8_t(code_at(codes, first + j) | code_at(codes, first + j + 8) << 4);
    }
  }
}

// The layer as llama.cpp's GGUF holds it: gate and up apart, each [E][I][row of H], down
// [E][H][row of I]; gpt-oss's biases apart ([E][I], [E][I], [E][H]).
struct GgmlHostExperts {
  std::vector<uint8_t> gate, up, down;
  std::vector<float> gate_b, up_b, down_b;
};

GgmlHostExperts to_ggml_layout(const MoeModel& m, const RawExperts& raw) {
  const BlockFormat f = m.format;
  const ggml_type type = ggml_type_of(f);
  const int64_t e_n = m.experts, h = m.hidden, i_n = m.inter;
  const int64_t sfv = quantkv::sf_vector_size(f);
  const auto row13 = std::size_t(ggml_row_size(type, h)),
             row2 = std::size_t(ggml_row_size(type, i_n));
  const auto qrow13 = std::size_t(quantkv::row_bytes(f, h)),
             qrow2 = std::size_t(quantkv::row_bytes(f, i_n));
  GgmlHostExperts g;
  g.gate.resize(std::size_t(e_n * i_n) * row13);
  g.up.resize(g.gate.size());
  g.down.resize(std::size_t(e_n * h) * row2);
  for (int64_t e = 0; e < e_n; ++e) {
    for (int64_t i = 0; i < i_n; ++i) {
      // gpt-oss interleaves (row 2i gate i, 2i + 1 up i); Qwen3 stacks halves.
      const int64_t gate_row = e * 2 * i_n + (m.gpt_oss ? 2 * i : i);
      const int64_t up_row = e * 2 * i_n + (m.gpt_oss ? 2 * i + 1 : i_n + i);
      const auto out = std::size_t(e * i_n + i);
      to_ggml_row(f, &raw.w13[std::size_t(gate_row) * qrow13],
                  &raw.s13[std::size_t(gate_row * (h / sfv))], h, &g.gate[out * row13]);
      to_ggml_row(f, &raw.w13[std::size_t(up_row) * qrow13],
                  &raw.s13[std::size_t(up_row * (h / sfv))], h, &g.up[out * row13]);
    }
    for (int64_t r = e * h; r < (e + 1) * h; ++r)
      to_ggml_row(f, &raw.w2[std::size_t(r) * qrow2], &raw.s2[std::size_t(r * (i_n / sfv))], i_n,
                  &g.down[std::size_t(r) * row2]);
  }
  if (m.gpt_oss) {
    for (int64_t e = 0; e < e_n; ++e) {
      for (int64_t i = 0; i < i_n; ++i) {
        g.gate_b.push_back(raw.b13[std::size_t(e * 2 * i_n + 2 * i)]);
        g.up_b.push_back(raw.b13[std::size_t(e * 2 * i_n + 2 * i + 1)]);
      }
    }
    g.down_b = raw.b2;
  }
  return g;
}

// ------------------------------------------------------------------ ggml's side

struct GgmlCpu {
  ggml_backend_t backend = nullptr;
  ggml_backend_dev_t dev = nullptr;
  ggml_backend_buffer_type_t repack = nullptr;  // CPU_REPACK, when the CPU backend has it
  std::map<int, ggml_threadpool*> pools;        // one persistent pool per thread count
  std::string extra_names;                      // the CPU backend's extra buffer types

  explicit GgmlCpu(const std::vector<int>& threads) {
    backend = ggml_backend_cpu_init();
    if (backend == nullptr) die("ggml_backend_cpu_init failed");
    dev = ggml_backend_get_device(backend);
    // As llama.cpp finds the CPU backend's extra buffer types.
    auto* get_extra =
        reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
            ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
    if (get_extra != nullptr) {
      for (ggml_backend_buffer_type_t* b = get_extra(dev); b != nullptr && *b != nullptr; ++b) {
        extra_names += (extra_names.empty() ? "" : ", ") + std::string(ggml_backend_buft_name(*b));
        if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) repack = *b;
      }
    }
    for (int t : threads) {
      if (pools.count(t) != 0) continue;
      ggml_threadpool_params p = ggml_threadpool_params_default(t);
      ggml_threadpool* pool = ggml_threadpool_new(&p);
      if (pool == nullptr) die("ggml_threadpool_new failed");
      pools[t] = pool;
    }
  }
  ~GgmlCpu() {
    for (auto& [t, pool] : pools) ggml_threadpool_free(pool);
    ggml_backend_free(backend);
  }
  GgmlCpu(const GgmlCpu&) = delete;
  GgmlCpu& operator=(const GgmlCpu&) = delete;

  void use_threads(int t) {
    ggml_backend_cpu_set_threadpool(backend, pools.at(t));
    ggml_backend_cpu_set_n_threads(backend, t);
  }

  // Whether the CPU device runs MUL_MAT_ID on a weight of this shape and type held in buft (the
  // check llama.cpp makes before placing a weight in an extra buffer type).
  bool runs_mul_mat_id_from(ggml_backend_buffer_type_t buft, ggml_type type, int64_t k, int64_t n,
                            int64_t experts, int64_t top_k) const {
    ggml_init_params ip{8 * ggml_tensor_overhead(), nullptr, true};
    ggml_context* ctx = ggml_init(ip);
    ggml_tensor* w = ggml_new_tensor_3d(ctx, type, k, n, experts);
    ggml_tensor* b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, top_k, 512);
    ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, top_k, 512);
    ggml_tensor* op = ggml_mul_mat_id(ctx, w, b, ids);
    w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
    const bool ok = ggml_backend_dev_supports_op(dev, op);
    ggml_backend_buffer_free(w->buffer);
    w->buffer = nullptr;
    ggml_free(ctx);
    return ok;
  }
};

struct GgmlCopy {                                               // one copy of the layer's tensors
  ggml_tensor *gate = nullptr, *up = nullptr, *down = nullptr;  // [H, I, E], [I, H, E]
  ggml_tensor *gate_b = nullptr, *up_b = nullptr, *down_b = nullptr;  // gpt-oss: [I, E], [H, E]
  ggml_tensor *gate_s = nullptr, *up_s = nullptr, *down_s = nullptr;  // NVFP4 scale2: [E]
};

// The layer's copies in one placement: the expert matrices in `buft`, the small tensors in the
// CPU buffer (llama.cpp's placement: only MUL_MAT(_ID) weights go to CPU_REPACK).
struct GgmlLayer {
  ggml_context* ctx_mats = nullptr;
  ggml_context* ctx_small = nullptr;
  ggml_backend_buffer_t buf_mats = nullptr, buf_small = nullptr;
  std::vector<GgmlCopy> copies;

  GgmlLayer(const MoeModel& m, const GgmlHostExperts& host, const RawExperts& raw,
            ggml_backend_buffer_type_t buft, int n_copies) {
    const ggml_type type = ggml_type_of(m.format);
    const int64_t e = m.experts, h = m.hidden, i = m.inter;
    const bool scaled = m.format == BlockFormat::kNVFP4;
    ggml_init_params ip{std::size_t(3 * n_copies) * ggml_tensor_overhead(), nullptr, true};
    ctx_mats = ggml_init(ip);
    ctx_small = ggml_init(ip);
    copies.resize(std::size_t(n_copies));
    for (GgmlCopy& c : copies) {
      c.gate = ggml_new_tensor_3d(ctx_mats, type, h, i, e);
      c.up = ggml_new_tensor_3d(ctx_mats, type, h, i, e);
      c.down = ggml_new_tensor_3d(ctx_mats, type, i, h, e);
      if (m.gpt_oss) {
        c.gate_b = ggml_new_tensor_2d(ctx_small, GGML_TYPE_F32, i, e);
        c.up_b = ggml_new_tensor_2d(ctx_small, GGML_TYPE_F32, i, e);
        c.down_b = ggml_new_tensor_2d(ctx_small, GGML_TYPE_F32, h, e);
      } else if (scaled) {
        c.gate_s = ggml_new_tensor_1d(ctx_small, GGML_TYPE_F32, e);
        c.up_s = ggml_new_tensor_1d(ctx_small, GGML_TYPE_F32, e);
        c.down_s = ggml_new_tensor_1d(ctx_small, GGML_TYPE_F32, e);
      }
    }
    buf_mats = ggml_backend_alloc_ctx_tensors_from_buft(ctx_mats, buft);
    if (buf_mats == nullptr) die("cannot allocate the expert weights");
    ggml_backend_buffer_set_usage(buf_mats, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (m.gpt_oss || scaled) {
      buf_small =
          ggml_backend_alloc_ctx_tensors_from_buft(ctx_small, ggml_backend_cpu_buffer_type());
      if (buf_small == nullptr) die("cannot allocate the biases / scales");
      ggml_backend_buffer_set_usage(buf_small, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    for (GgmlCopy& c : copies) {
      // Into a CPU_REPACK buffer, set_tensor repacks (whole tensors only).
      ggml_backend_tensor_set(c.gate, host.gate.data(), 0, host.gate.size());
      ggml_backend_tensor_set(c.up, host.up.data(), 0, host.up.size());
      ggml_backend_tensor_set(c.down, host.down.data(), 0, host.down.size());
      if (m.gpt_oss) {
        ggml_backend_tensor_set(c.gate_b, host.gate_b.data(), 0, host.gate_b.size() * 4);
        ggml_backend_tensor_set(c.up_b, host.up_b.data(), 0, host.up_b.size() * 4);
        ggml_backend_tensor_set(c.down_b, host.down_b.data(), 0, host.down_b.size() * 4);
      } else if (scaled) {  // quantkv's per-expert alpha (1 / g_w) is the checkpoint's scale2
        for (ggml_tensor* s : {c.gate_s, c.up_s, c.down_s})
          ggml_backend_tensor_set(s, raw.alpha.data(), 0, raw.alpha.size() * 4);
      }
    }
  }
  ~GgmlLayer() {
    ggml_backend_buffer_free(buf_mats);
    if (buf_small != nullptr) ggml_backend_buffer_free(buf_small);
    ggml_free(ctx_mats);
    ggml_free(ctx_small);
  }
  GgmlLayer(const GgmlLayer&) = delete;
  GgmlLayer& operator=(const GgmlLayer&) = delete;
};

// The inputs of T tokens, shared by the graphs of one T: x [H, T], the selected experts
// [k, T] and the router weights [1, k, T].
struct GgmlInputs {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buf = nullptr;
  ggml_tensor *x = nullptr, *ids = nullptr, *weights = nullptr;

  GgmlInputs(const MoeModel& m, int64_t t, const std::vector<float>& x_host) {
    ggml_init_params ip{4 * ggml_tensor_overhead(), nullptr, true};
    ctx = ggml_init(ip);
    x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m.hidden, t);
    ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, m.top_k, t);
    weights = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, m.top_k, t);
    buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    if (buf == nullptr) die("cannot allocate the inputs");
    ggml_backend_tensor_set(x, x_host.data(), 0, x_host.size() * 4);
  }
  ~GgmlInputs() {
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
  }
  GgmlInputs(const GgmlInputs&) = delete;
  GgmlInputs& operator=(const GgmlInputs&) = delete;

  void route(const Routing& r) {
    ggml_backend_tensor_set(ids, r.ids.data(), 0, r.ids.size() * 4);
    ggml_backend_tensor_set(weights, r.weights.data(), 0, r.weights.size() * 4);
  }
};

// llama.cpp's build_lora_mm_id with a per-expert scale: the scale of each selected expert,
// broadcast over the rows.
ggml_tensor* mul_mat_id_scaled(ggml_context* ctx, ggml_tensor* w, ggml_tensor* w_s,
                               ggml_tensor* cur, ggml_tensor* ids) {
  ggml_tensor* res = ggml_mul_mat_id(ctx, w, cur, ids);
  if (w_s != nullptr) {
    const int64_t n_expert = w_s->ne[0], n_tokens = cur->ne[2];
    ggml_tensor* s = ggml_reshape_3d(ctx, w_s, 1, n_expert, 1);
    s = ggml_repeat_4d(ctx, s, 1, n_expert, n_tokens, 1);
    s = ggml_get_rows(ctx, s, ids);
    res = ggml_mul(ctx, res, s);
  }
  return res;
}

// llama.cpp's build_moe_ffn from the selected experts on (separate gate and up, no weighting
// before the FFN), with its graph's node order.
struct GgmlGraph {
  ggml_context* ctx = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_gallocr_t alloc = nullptr;
  ggml_tensor* out = nullptr;  // [H, T]

  GgmlGraph(const MoeModel& m, const GgmlCopy& c, const GgmlInputs& in) {
    ggml_init_params ip{ggml_tensor_overhead() * GGML_DEFAULT_GRAPH_SIZE + ggml_graph_overhead(),
                        nullptr, true};
    ctx = ggml_init(ip);
    graph = ggml_new_graph(ctx);
    const int64_t h = m.hidden, k = m.top_k, t = in.x->ne[1];
    ggml_tensor* cur = ggml_reshape_3d(ctx, in.x, h, 1, t);
    ggml_tensor* up = mul_mat_id_scaled(ctx, c.up, c.up_s, cur, in.ids);  // [I, k, T]
    if (c.up_b != nullptr) up = ggml_add_id(ctx, up, c.up_b, in.ids);
    ggml_tensor* gate = mul_mat_id_scaled(ctx, c.gate, c.gate_s, cur, in.ids);
    if (c.gate_b != nullptr) gate = ggml_add_id(ctx, gate, c.gate_b, in.ids);
    ggml_tensor* act =
        m.gpt_oss ? ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f) : ggml_swiglu_split(ctx, gate, up);
    ggml_tensor* experts = mul_mat_id_scaled(ctx, c.down, c.down_s, act, in.ids);  // [H, k, T]
    if (c.down_b != nullptr) experts = ggml_add_id(ctx, experts, c.down_b, in.ids);
    experts = ggml_mul(ctx, experts, in.weights);
    ggml_build_forward_expand(graph, experts);
    std::vector<ggml_tensor*> slot(static_cast<std::size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      slot[std::size_t(j)] =
          ggml_view_2d(ctx, experts, h, t, experts->nb[2], std::size_t(j) * experts->nb[1]);
      ggml_build_forward_expand(graph, slot[std::size_t(j)]);
    }
    out = slot[0];
    for (int64_t j = 1; j < k; ++j) {
      out = ggml_add(ctx, out, slot[std::size_t(j)]);
      ggml_build_forward_expand(graph, out);
    }
    if (k == 1) out = ggml_cont(ctx, out);
    ggml_set_output(out);
    ggml_build_forward_expand(graph, out);
    alloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(alloc, graph)) die("cannot allocate the graph");
  }
  ~GgmlGraph() {
    ggml_gallocr_free(alloc);
    ggml_free(ctx);
  }
  GgmlGraph(const GgmlGraph&) = delete;
  GgmlGraph& operator=(const GgmlGraph&) = delete;
};

// ------------------------------------------------------------------ the run

void print_line(const MoeModel& m, int64_t t, int threads, const char* impl, double ms, int calls,
                const std::string& diff) {
  std::printf("%-14s %4lld %7d  %-14s %10.3f %6d  %s\n", m.name, static_cast<long long>(t), threads,
              impl, ms, calls, diff.c_str());
  std::fflush(stdout);
}

std::string diff_text(double d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", d);
  return b;
}

void run_layer(const MoeModel& m, const Options& o, GgmlCpu& cpu) {
  using namespace quantkv;
  const RawExperts raw = moe_layers::make_raw_experts(m);
  // quantkv: prepared once, copied.
  std::vector<PreparedExperts> prepared(std::size_t(o.copies));
  if (!prepare_experts(raw.source(m), &prepared[0], Context{}).ok()) die("prepare_experts failed");
  for (std::size_t c = 1; c < prepared.size(); ++c) prepared[c] = prepared[0];
  // ggml: both placements (repack only where the CPU backend repacks this type).
  const GgmlHostExperts host = to_ggml_layout(m, raw);
  const ggml_type type = ggml_type_of(m.format);
  const bool repacks =
      cpu.repack != nullptr &&
      cpu.runs_mul_mat_id_from(cpu.repack, type, m.hidden, m.inter, m.experts, m.top_k) &&
      cpu.runs_mul_mat_id_from(cpu.repack, type, m.inter, m.hidden, m.experts, m.top_k);
  GgmlLayer plain(m, host, raw, ggml_backend_cpu_buffer_type(), o.copies);
  std::unique_ptr<GgmlLayer> repacked;
  if (repacks) repacked = std::make_unique<GgmlLayer>(m, host, raw, cpu.repack, o.copies);

  for (int64_t t : o.tokens) {
    const std::vector<Routing> routings = moe_layers::make_routings(m, t);
    const int64_t h = m.hidden, k = m.top_k;
    const std::vector<bfloat16> x = moe_layers::make_input(t, h);
    std::vector<float> xf(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i].bits);

    GgmlInputs in(m, t, xf);
    std::vector<std::unique_ptr<GgmlGraph>> g_plain, g_repack;
    for (const GgmlCopy& c : plain.copies) g_plain.push_back(std::make_unique<GgmlGraph>(m, c, in));
    if (repacked != nullptr)
      for (const GgmlCopy& c : repacked->copies)
        g_repack.push_back(std::make_unique<GgmlGraph>(m, c, in));

    for (int threads : o.threads) {
      std::vector<float> ref;
      for (bool quantised : {false, true}) {
        std::vector<bfloat16> y(std::size_t(t * h));
        FusedExpertsArgs a = moe_layers::fused_args(m, t, quantised, x.data(), y.data(),
                                                    raw.b13.data(), raw.b2.data());
        Context ctx;
        ctx.num_threads = threads;
        std::vector<float> first;
        int calls = 0;
        const double ms = mean_ms(
            [&](std::size_t call) {
              const Routing& r = routings[call % routings.size()];
              a.experts = &prepared[call % prepared.size()];
              moe_layers::route(a, r, t, k);
              const Status s = fused_experts(a, ctx);
              if (!s.ok()) die(s.to_string());
              if (call == 0) {
                first.resize(y.size());
                for (std::size_t i = 0; i < y.size(); ++i) first[i] = bf16_to_float(y[i].bits);
              }
            },
            o.min_time, &calls);
        if (!quantised) ref = first;
        print_line(m, t, threads, quantised ? "quantkv_w4a4" : "quantkv_w4a16", ms, calls,
                   quantised ? diff_text(max_rel_diff(first, ref)) : "ref");
      }
      cpu.use_threads(threads);
      for (bool repack : {false, true}) {
        if (repack && !repacks) {
          std::printf(
              "%-14s %4lld %7d  %-14s %10s %6s  no CPU_REPACK for %s: llama.cpp runs the "
              "plain line's path\n",
              m.name, static_cast<long long>(t), threads, "ggml_repack", "-", "-",
              ggml_type_name(type));
          continue;
        }
        auto& graphs = repack ? g_repack : g_plain;
        std::vector<float> first;
        int calls = 0;
        const double ms = mean_ms(
            [&](std::size_t call) {
              in.route(routings[call % routings.size()]);
              GgmlGraph& g = *graphs[call % graphs.size()];
              if (ggml_backend_graph_compute(cpu.backend, g.graph) != GGML_STATUS_SUCCESS)
                die("ggml_backend_graph_compute failed");
              if (call == 0) {
                first.resize(std::size_t(t * h));
                ggml_backend_tensor_get(g.out, first.data(), 0, first.size() * 4);
              }
            },
            o.min_time, &calls);
        print_line(m, t, threads, repack ? "ggml_repack" : "ggml_plain", ms, calls,
                   diff_text(max_rel_diff(first, ref)));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  GgmlCpu cpu(o.threads);
  std::printf("cpu: %s\n", cpu_name().c_str());
  std::printf("ggml: %s, commit %s; the CPU backend's extra buffer types: %s\n", ggml_version(),
              ggml_commit(), cpu.extra_names.empty() ? "none" : cpu.extra_names.c_str());
  std::printf(
      "mean wall ms per call after one warm-up call, >= %.2f s and >= 2 calls; weight copies: %d, "
      "16 routings, rotated call by call\n",
      o.min_time, o.copies);
  std::printf("diff: max |y - y_ref| / max |y_ref| on the warm-up call, y_ref quantkv w4a16's\n");
  std::printf("%-14s %4s %7s  %-14s %10s %6s  %s\n", "layer", "T", "threads", "impl", "ms/call",
              "calls", "diff");
  for (const std::string& name : o.layers) {
    if (name == moe_layers::kGptOss20B.name)
      run_layer(moe_layers::kGptOss20B, o, cpu);
    else if (name == moe_layers::kQwen3A3B.name)
      run_layer(moe_layers::kQwen3A3B, o, cpu);
    else
      die("unknown layer " + name);
  }
  return 0;
}
