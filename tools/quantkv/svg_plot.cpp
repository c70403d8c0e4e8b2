#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace quantkv::tool {
namespace {

constexpr double kWidth = 900, kHeight = 540;
constexpr double kLeft = 80, kRight = 230, kTop = 50, kBottom = 60;  // margins
const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b"};
const char* const kRoofColours[] = {"#555555", "#e377c2", "#17becf"};

std::string escape(const std::string& text) {
  std::string s;
  for (const char c : text) {
    if (c == '<')
      s += "&lt;";
    else if (c == '>')
      s += "&gt;";
    else if (c == '&')
      s += "&amp;";
    else
      s += c;
  }
  return s;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(int decade) {
  if (decade >= 0 && decade <= 5) return std::to_string(int64_t(std::pow(10.0, decade)));
  if (decade < 0 && decade >= -3) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.*f", -decade, std::pow(10.0, decade));
    return buf;
  }
  return "1e" + std::to_string(decade);
}

// Log-scale axes over whole decades.
struct Axes {
  int x_lo, x_hi, y_lo, y_hi;  // decades
  double px(double v) const {
    const double f = (std::log10(v) - x_lo) / (x_hi - x_lo);
    return kLeft + f * (kWidth - kLeft - kRight);
  }
  double py(double v) const {
    const double f = (std::log10(v) - y_lo) / (y_hi - y_lo);
    return kHeight - kBottom - f * (kHeight - kTop - kBottom);
  }
};

Axes choose_axes(const std::vector<RooflinePoint>& points, const std::vector<Roof>& roofs,
                 double bandwidth) {
  double x_min = 1e300, x_max = 0, y_min = 1e300, y_max = 0;
  for (const RooflinePoint& p : points) {
    x_min = std::min(x_min, p.intensity);
    x_max = std::max(x_max, p.intensity);
    y_min = std::min(y_min, p.gflops);
    y_max = std::max(y_max, p.gflops);
  }
  for (const Roof& r : roofs) {
    y_max = std::max(y_max, r.gflops);
    if (bandwidth > 0) x_max = std::max(x_max, r.gflops / bandwidth);  // the ridge point
  }
  if (x_max <= 0) x_min = 0.1, x_max = 10;
  if (y_max <= 0) y_min = 1, y_max = 10;
  Axes a;
  a.x_lo = int(std::floor(std::log10(x_min / 1.5)));
  a.x_hi = std::max(a.x_lo + 1, int(std::ceil(std::log10(x_max * 1.5))));
  a.y_lo =
      int(std::floor(std::log10(std::min(y_min, bandwidth > 0 ? bandwidth * x_min : y_min) / 1.5)));
  a.y_hi = std::max(a.y_lo + 1, int(std::ceil(std::log10(y_max * 1.5))));
  return a;
}

void draw_grid(std::string& svg, const Axes& a) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop, y1 = kHeight - kBottom;
  for (int d = a.x_lo; d <= a.x_hi; ++d) {
    const double x = a.px(std::pow(10.0, d));
    svg += "<line x1='" + num(x) + "' y1='" + num(y0) + "' x2='" + num(x) + "' y2='" + num(y1) +
           "' stroke='#ddd'/>\n";
    svg += "<text x='" + num(x) + "' y='" + num(y1 + 18) + "' text-anchor='middle'>" +
           tick_label(d) + "</text>\n";
  }
  for (int d = a.y_lo; d <= a.y_hi; ++d) {
    const double y = a.py(std::pow(10.0, d));
    svg += "<line x1='" + num(x0) + "' y1='" + num(y) + "' x2='" + num(x1) + "' y2='" + num(y) +
           "' stroke='#ddd'/>\n";
    svg += "<text x='" + num(x0 - 8) + "' y='" + num(y + 4) + "' text-anchor='end'>" +
           tick_label(d) + "</text>\n";
  }
  svg += "<rect x='" + num(x0) + "' y='" + num(y0) + "' width='" + num(x1 - x0) + "' height='" +
         num(y1 - y0) + "' fill='none' stroke='#333'/>\n";
  svg += "<text x='" + num((x0 + x1) / 2) + "' y='" + num(kHeight - 15) +
         "' text-anchor='middle'>arithmetic intensity (flop / byte)</text>\n";
  svg += "<text transform='translate(20," + num((y0 + y1) / 2) +
         ") rotate(-90)' text-anchor='middle'>GFLOP/s (GOP/s for int8)</text>\n";
}

}  // namespace

std::string roofline_svg(const std::string& title, const std::vector<RooflinePoint>& points,
                         const std::vector<Roof>& roofs, double bandwidth) {
  const Axes a = choose_axes(points, roofs, bandwidth);
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + num(kWidth) + "' height='" +
                    num(kHeight) + "' font-family='sans-serif' font-size='12'>\n";
  svg += "<rect width='100%' height='100%' fill='white'/>\n";
  svg += "<text x='" + num(kLeft) + "' y='28' font-size='15'>" + escape(title) + "</text>\n";
  draw_grid(svg, a);
  const double x_lo = std::pow(10.0, a.x_lo), x_hi = std::pow(10.0, a.x_hi);
  double legend_y = kTop + 10;
  const double legend_x = kWidth - kRight + 15;
  auto legend = [&](const std::string& colour, const std::string& text, bool line) {
    svg += line ? "<line x1='" + num(legend_x) + "' y1='" + num(legend_y - 4) + "' x2='" +
                      num(legend_x + 18) + "' y2='" + num(legend_y - 4) + "' stroke='" + colour +
                      "' stroke-width='2'/>\n"
                : "<circle cx='" + num(legend_x + 9) + "' cy='" + num(legend_y - 4) +
                      "' r='5' fill='" + colour + "'/>\n";
    svg += "<text x='" + num(legend_x + 24) + "' y='" + num(legend_y) + "'>" + escape(text) +
           "</text>\n";
    legend_y += 20;
  };
  // Roofs: min(peak, bandwidth * intensity), sampled finely enough to show the ridge.
  for (std::size_t i = 0; i < roofs.size(); ++i) {
    const char* colour = kRoofColours[i % 3];
    std::string pts;
    for (int s = 0; s <= 200; ++s) {
      const double x = x_lo * std::pow(x_hi / x_lo, s / 200.0);
      const double y = bandwidth > 0 ? std::min(roofs[i].gflops, bandwidth * x) : roofs[i].gflops;
      if (y < std::pow(10.0, a.y_lo)) continue;
      pts += num(a.px(x)) + "," + num(a.py(y)) + " ";
    }
    svg +=
        "<polyline points='" + pts + "' fill='none' stroke='" + colour + "' stroke-width='2'/>\n";
    legend(colour, roofs[i].label, true);
  }
  if (bandwidth > 0) {  // the bandwidth slope on its own, dashed, up to the top of the plot
    const double x_end = std::min(x_hi, std::pow(10.0, a.y_hi) / bandwidth);
    const double x_start = std::max(x_lo, std::pow(10.0, a.y_lo) / bandwidth);
    svg += "<line x1='" + num(a.px(x_start)) + "' y1='" + num(a.py(bandwidth * x_start)) +
           "' x2='" + num(a.px(x_end)) + "' y2='" + num(a.py(bandwidth * x_end)) +
           "' stroke='#999999' stroke-dasharray='5,4'/>\n";
    legend("#999999", "read bw " + num(bandwidth) + " GB/s", true);
  }
  std::vector<std::string> groups;
  struct Box {
    double x0, y0, x1, y1;
  };
  std::vector<Box> placed;  // labels already drawn: a new one moves down until it is clear
  for (const RooflinePoint& p : points) {
    auto it = std::find(groups.begin(), groups.end(), p.group);
    const std::size_t g = it - groups.begin();
    if (it == groups.end()) groups.push_back(p.group);
    const char* colour = kColours[g % 5];
    const double x = a.px(p.intensity), y = a.py(std::max(p.gflops, std::pow(10.0, a.y_lo)));
    svg += "<circle cx='" + num(x) + "' cy='" + num(y) + "' r='5' fill='" + colour + "'><title>" +
           escape(p.label) + "</title></circle>\n";
    Box box{x + 7, y - 15, x + 7 + 5.5 * double(p.label.size()), y - 4};
    auto overlaps = [&](const Box& b) {
      return std::any_of(placed.begin(), placed.end(), [&](const Box& o) {
        return b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1;
      });
    };
    for (int tries = 0; tries < 8 && overlaps(box); ++tries) box.y0 += 12, box.y1 += 12;
    placed.push_back(box);
    svg += "<text x='" + num(box.x0) + "' y='" + num(box.y1 - 2) + "' font-size='10' fill='" +
           colour + "'>" + escape(p.label) + "</text>\n";
  }
  for (std::size_t g = 0; g < groups.size(); ++g) legend(kColours[g % 5], groups[g], false);
  svg += "</svg>\n";
  return svg;
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("--svg: cannot open '" + path + "' for writing");
  out << text;
  out.close();
  if (!out) return invalid_argument("--svg: writing '" + path + "' failed");
  return Status::Ok();
}

}  // namespace quantkv::tool
