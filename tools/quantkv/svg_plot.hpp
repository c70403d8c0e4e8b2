// A roofline-style SVG: achieved rate against arithmetic intensity, both on log axes, under
// the machine's ceilings (compute roofs and the memory-bandwidth slope).
#pragma once

#include <string>
#include <vector>

#include "quantkv/status.hpp"

namespace quantkv::tool {

struct RooflinePoint {
  std::string label;  // shown beside the point
  std::string group;  // one colour per group ("indexer", "qkv")
  double intensity;   // flops per byte
  double gflops;      // achieved
};

struct Roof {
  std::string label;  // "bf16 dot 412 GFLOP/s"
  double gflops;      // compute ceiling
};

// `bandwidth_gbs` draws the sloped roof rate = bandwidth * intensity under every compute roof.
std::string roofline_svg(const std::string& title, const std::vector<RooflinePoint>& points,
                         const std::vector<Roof>& roofs, double bandwidth_gbs);

Status write_text_file(const std::string& path, const std::string& text);

}  // namespace quantkv::tool
