#include "bin/bench_chart.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tessera {
namespace {

// Text for an SVG text node or attribute.
std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks up to `top`.
double tick_step(double top, int ticks) {
  const double raw = top / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

// Three significant figures at most, with k and M for thousands and millions (830k, 1.25M, 1M).
std::string rate_text(double rate) {
  if (rate >= 1e6) return fmt::format("{:.3g}M", rate / 1e6);
  if (rate >= 1e3) return fmt::format("{:.3g}k", rate / 1e3);
  return fmt::format("{:.3g}", rate);
}

constexpr int kWidth = 1100, kLeft = 200, kRight = 310, kTop = 70, kBar = 22, kGap = 12;
constexpr const char* kBarColour = "#4a7fb5";
constexpr const char* kBestColour = "#2e8b57";
constexpr const char* kBaselineColour = "#a0a0a0";
constexpr const char* kPredictedColour = "#d9534f";

}  // namespace

std::string bench_chart_svg(const BenchChart& chart) {
  const double batch = static_cast<double>(chart.batch);
  auto rate = [&](double ms) { return batch / (ms / 1e3); };
  std::vector<const BenchRow*> drawn = {&chart.one_device};
  for (const auto& r : chart.rows) drawn.push_back(&r);

  // The axis spans the measurements; a prediction far beyond them points off the axis.
  double top_rate = 0;
  for (const BenchRow* r : drawn) top_rate = std::max(top_rate, rate(r->step_ms.min));
  for (const BenchRow* r : drawn)
    if (r != &chart.one_device && r->predicted_ms > 0 && rate(r->predicted_ms) <= 1.5 * top_rate)
      top_rate = std::max(top_rate, rate(r->predicted_ms));
  const double step = tick_step(top_rate, 5);
  const double axis_top = std::ceil(top_rate / step) * step;
  const double plot = kWidth - kLeft - kRight;
  auto x = [&](double r) { return kLeft + plot * r / axis_top; };

  const int rows_bottom = kTop + static_cast<int>(drawn.size()) * (kBar + kGap);
  const int axis_y = rows_bottom + 2, legend_y = axis_y + 58;
  const int height = legend_y + 30;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" font-family=\"sans-serif\" font-size=\"13\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"12\" y=\"24\" font-size=\"16\">{2}: training samples/s per sharding configuration (higher is better)</text>\n"
      "<text x=\"12\" y=\"44\" font-size=\"12\" fill=\"#555\">{3}</text>\n",
      kWidth, height, xml_escaped(chart.title), xml_escaped(chart.subtitle));

  // Grid lines and the x axis, in samples/s.
  for (double t = 0; t <= axis_top + step / 2; t += step)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>\n"
        "<line x1=\"{0:.1f}\" y1=\"{2}\" x2=\"{0:.1f}\" y2=\"{3}\" stroke=\"#333\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{4}\" text-anchor=\"middle\" font-size=\"12\">{5}</text>\n",
        x(t), kTop - 6, axis_y, axis_y + 5, axis_y + 19, rate_text(t));
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2:.1f}\" y2=\"{1}\" stroke=\"#333\"/>\n"
      "<text x=\"{3:.1f}\" y=\"{4}\" text-anchor=\"middle\">samples/s (batch {5} / step time)</text>\n",
      kLeft, axis_y, x(axis_top), kLeft + plot / 2, axis_y + 38, chart.batch);

  for (std::size_t i = 0; i < drawn.size(); ++i) {
    const BenchRow& r = *drawn[i];
    const bool baseline = i == 0, best = !baseline && i - 1 == chart.best;
    const int y = kTop + static_cast<int>(i) * (kBar + kGap);
    const double mid = y + kBar / 2.0;
    const std::string label = baseline ? r.layout : r.label() + (r.processes > 1 ? fmt::format(", {} processes", r.processes) : "");
    const char* fill = baseline ? kBaselineColour : best ? kBestColour : kBarColour;
    const double low = x(rate(r.step_ms.max)), high = x(rate(r.step_ms.min));
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\"{}>{}</text>\n"
        "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n"
        "<path class=\"whisker\" d=\"M{:.1f} {:.1f}H{:.1f}M{:.1f} {}V{}M{:.1f} {}V{}\" stroke=\"#222\" stroke-width=\"1.5\" fill=\"none\"/>\n",
        kLeft - 8, mid + 4.5, best ? " font-weight=\"bold\"" : "", xml_escaped(label), baseline ? "baseline" : "bar", kLeft, y,
        x(rate(r.step_ms.median)) - kLeft, kBar, fill, low, mid, high, low, y + 5, y + kBar - 5, high, y + 5, y + kBar - 5);
    double right = high;
    std::string off_axis;
    if (!baseline && r.predicted_ms > 0) {
      const double predicted = rate(r.predicted_ms);
      if (predicted <= axis_top) {  // a triangle above the bar, pointing down at the predicted rate
        const double px = x(predicted);
        svg += fmt::format("<path class=\"predicted\" d=\"M{:.1f} {}L{:.1f} {}L{:.1f} {}Z\" fill=\"{}\"/>\n", px - 5, y - 8,
                           px + 5, y - 8, px, y - 1, kPredictedColour);
        right = std::max(right, px + 5);
      } else {  // at the axis' end, pointing right: the prediction lies beyond
        const double px = x(axis_top);
        svg += fmt::format("<path class=\"predicted\" d=\"M{:.1f} {}L{:.1f} {:.1f}L{:.1f} {}Z\" fill=\"{}\"/>\n", px - 8, y - 9,
                           px, y - 5.0, px - 8, y - 1, kPredictedColour);
        off_axis = ", predicted " + rate_text(predicted) + "/s";
      }
    }
    const std::string speedup =
        baseline ? "" : fmt::format(", {:.2f}x ({:.2f}-{:.2f})", r.speedup.median, r.speedup.min, r.speedup.max);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\">{}/s{}{}{}</text>\n", right + 6, mid + 4.5,
                       rate_text(rate(r.step_ms.median)), speedup, best ? " best" : "", off_axis);
  }
  const double one = x(rate(chart.one_device.step_ms.median));
  svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#555\" stroke-dasharray=\"5 4\"/>\n",
                     one, kTop - 6, axis_y);

  // The legend: one glyph and its words per mark.
  int lx = 12;
  auto item = [&](const std::string& glyph, const std::string& words, int advance) {
    svg += glyph + fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">{}</text>\n", lx + 22, legend_y + 4, words);
    lx += advance;
  };
  const int ly = legend_y;
  item(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"10\" fill=\"{}\"/>\n", lx, ly - 6, kBarColour),
       "median over rounds", 160);
  item(fmt::format("<path d=\"M{0} {1}H{2}M{0} {3}V{4}M{2} {3}V{4}\" stroke=\"#222\" stroke-width=\"1.5\"/>\n", lx, ly,
                   lx + 16, ly - 5, ly + 5),
       "min-max over rounds", 168);
  item(fmt::format("<path d=\"M{} {}L{} {}L{} {}Z\" fill=\"{}\"/>\n", lx + 3, ly - 5, lx + 13, ly - 5, lx + 8, ly + 3,
                   kPredictedColour),
       "cost model's prediction (pointing right: beyond the axis)", 370);
  item(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#555\" stroke-dasharray=\"5 4\"/>\n", lx, ly,
                   lx + 16, ly),
       "one device's median", 166);
  item(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"10\" fill=\"{}\"/>\n", lx, ly - 6, kBestColour),
       "fastest sharding", 170);
  return svg + "</svg>\n";
}

}  // namespace tessera
