// Validation and presets of the indexer front end (include/quantkv/indexer.hpp); the row
// itself is src/cpu/indexer_front_end.hpp, called by the K store and the Q prepare.
#include <string>

#include "ops/rope_options.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {

IndexerFrontEnd deepseek_v32_front_end(TensorView<const float, 2> freqs_cis,
                                       TensorView<const uint32_t, 1> position_ids) {
  IndexerFrontEnd fe;
  fe.apply_rope = true;
  fe.rope.freqs_cis = freqs_cis;
  fe.rope.position_ids = position_ids;
  fe.rope.layout = RopeLayout::kHalfSplit;
  fe.rope.placement = RopePlacement::kLeading;
  fe.hadamard = HadamardMode::kWalshHadamard;
  fe.rounding = FrontEndRounding::kBf16Steps;
  return fe;
}

namespace detail {

Status validate_front_end(const IndexerFrontEnd& fe, int64_t T, int64_t D,
                          bool positions_required) {
  if (fe.rounding != FrontEndRounding::kBf16Steps && fe.rounding != FrontEndRounding::kFloat32) {
    return invalid_argument("front_end.rounding: expected kBf16Steps or kFloat32, got " +
                            std::to_string(int(fe.rounding)));
  }
  if (fe.hadamard != HadamardMode::kNone && fe.hadamard != HadamardMode::kWalshHadamard) {
    return invalid_argument("front_end.hadamard: expected kNone or kWalshHadamard, got " +
                            std::to_string(int(fe.hadamard)));
  }
  if (fe.hadamard == HadamardMode::kWalshHadamard && (D < 1 || (D & (D - 1)) != 0)) {
    return invalid_argument(
        "front_end.hadamard: the Walsh-Hadamard rotation needs a row length D that is a "
        "power of two, got D = " +
        std::to_string(D));
  }
  if (!fe.apply_rope) return Status::Ok();
  return validate_rope_options(fe.rope, T, D, positions_required, "front_end.rope");
}

}  // namespace detail
}  // namespace quantkv
