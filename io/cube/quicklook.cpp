#include "io/cube/quicklook.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "core/number_text.h"
#include "io/cube/raster.h"

namespace ifusim {
namespace {

using detail::Canvas;
using detail::Rgb;

constexpr Rgb kWhite = {255, 255, 255};
constexpr Rgb kBlack = {0, 0, 0};
constexpr Rgb kEmpty = {160, 160, 160};  // empty spaxels (NaN)
constexpr Rgb kGrid = {225, 225, 225};
constexpr Rgb kLine = {31, 87, 163};

// viridis (van der Walt & Smith 2015, matplotlib) at 0, 0.1, ..., 1.
constexpr std::array<Rgb, 11> kViridis = {{{68, 1, 84},
                                           {72, 36, 117},
                                           {65, 68, 135},
                                           {53, 95, 141},
                                           {42, 120, 142},
                                           {33, 145, 140},
                                           {34, 168, 132},
                                           {68, 191, 112},
                                           {122, 209, 81},
                                           {189, 223, 38},
                                           {253, 231, 37}}};
// ColorBrewer RdBu, 11 classes, reversed (Brewer 2003): blue, white at 0.5, red.
constexpr std::array<Rgb, 11> kDiverging = {{{5, 48, 97},
                                             {33, 102, 172},
                                             {67, 147, 195},
                                             {146, 197, 222},
                                             {209, 229, 240},
                                             {247, 247, 247},
                                             {253, 219, 199},
                                             {244, 165, 130},
                                             {214, 96, 77},
                                             {178, 24, 43},
                                             {103, 0, 31}}};

Rgb colour(Colormap map, double t) {
  const auto& table = map == Colormap::viridis ? kViridis : kDiverging;
  t = std::clamp(t, 0.0, 1.0) * (table.size() - 1);
  const std::size_t i = std::min<std::size_t>(static_cast<std::size_t>(t), table.size() - 2);
  const double f = t - static_cast<double>(i);
  Rgb out;
  for (int c = 0; c < 3; ++c)
    out[c] = static_cast<std::uint8_t>(std::lround(table[i][c] * (1 - f) + table[i + 1][c] * f));
  return out;
}

// Ticks at multiples of a step of 1, 2 or 5 x 10^k, about `target` of them within [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target, double& step) {
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  step = (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

// Tick labels share one format: fixed point with as many decimals as the step needs for
// moderate magnitudes ("4785", "0.25"), else scientific with enough digits to tell ticks apart.
std::vector<std::string> tick_labels(const std::vector<double>& ticks, double step) {
  double max_abs = 0;
  for (double t : ticks) max_abs = std::max(max_abs, std::abs(t));
  const int step_exp = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  std::vector<std::string> out;
  char buf[40];
  for (double t : ticks) {
    if (max_abs < 1e6 && step >= 1e-3)
      std::snprintf(buf, sizeof buf, "%.*f", std::max(0, -step_exp), t);
    else if (t == 0)
      std::snprintf(buf, sizeof buf, "0");
    else {
      const int digits = static_cast<int>(std::floor(std::log10(std::abs(t)))) - step_exp;
      std::snprintf(buf, sizeof buf, "%.*e", std::clamp(digits, 0, 9), t);
    }
    out.push_back(buf);
  }
  return out;
}

}  // namespace

void write_map_png(const std::string& path, const std::vector<double>& values, int nx, int ny,
                   const MapStyle& style) {
  if (nx <= 0 || ny <= 0 || values.size() != static_cast<std::size_t>(nx) * ny)
    throw std::invalid_argument(path + ": map of " + std::to_string(values.size()) +
                                " values for nx = " + std::to_string(nx) +
                                ", ny = " + std::to_string(ny));
  // The value each spaxel is coloured by: NaN for no data (empty), -inf for a value <= 0 on a log
  // scale (a noise pixel below zero: drawn in the lowest colour, not as empty).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double below = -std::numeric_limits<double>::infinity();
  std::vector<double> shown(values.size());
  std::vector<double> finite;
  bool any_empty = false, any_non_positive = false;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) {
      shown[i] = nan;
      any_empty = true;
    } else if (style.log_scale && !(v > 0)) {
      shown[i] = below;
      any_non_positive = true;
    } else {
      shown[i] = style.log_scale ? std::log10(v) : v;
      finite.push_back(shown[i]);
    }
  }
  // The colour range spans the 2nd to the 98th percentile, so that a few outliers (a spaxel of
  // one star at the field's edge, a hot noise pixel) do not wash the map out; beyond it the
  // colours saturate. With fewer than 50 values every one is inside.
  double lo = 0, hi = -1;
  bool clipped = false;
  if (!finite.empty()) {
    std::sort(finite.begin(), finite.end());
    const std::size_t n = finite.size(), cut = n >= 50 ? n / 50 : 0;
    lo = finite[cut];
    hi = finite[n - 1 - cut];
    clipped = lo > finite.front() || hi < finite.back();
  }
  const bool have_range = lo <= hi;
  if (have_range && style.symmetric) {
    hi = std::max(std::abs(lo), std::abs(hi));
    lo = -hi;
  }
  const double span = have_range && hi > lo ? hi - lo : 1.0;

  const int pixel = std::clamp(480 / std::max(nx, ny), 1, 32);
  const int map_w = nx * pixel, map_h = ny * pixel;
  const int margin = 16, title_h = 30, bar_w = 18;
  auto label_of = [&](double v) {
    return style.log_scale ? number_text(std::pow(10.0, v), 3) : number_text(v, 3);
  };
  const std::string lo_label = have_range ? label_of(lo) : "no data";
  const std::string hi_label = have_range ? label_of(hi) : "";
  const std::string mid_label = have_range ? label_of(lo + 0.5 * (hi - lo)) : "";
  const int label_w = std::max({Canvas::text_width(lo_label, 2), Canvas::text_width(hi_label, 2),
                                Canvas::text_width(mid_label, 2)});
  std::string footer = style.unit.empty() ? "" : "[" + style.unit + "]";
  auto add = [&footer](const std::string& note, const char* separator) {
    footer += (footer.empty() ? "" : separator) + note;
  };
  if (style.log_scale) add("log scale", ", ");
  if (clipped) add("2-98th percentile", ", ");
  if (any_non_positive) add("lowest colour: <= 0", "; ");
  if (any_empty) add("grey: empty", "; ");
  const int bar_x = margin + map_w + 14;
  const int width = std::max({bar_x + bar_w + 8 + label_w + margin,
                              margin + Canvas::text_width(style.title, 2) + margin,
                              margin + Canvas::text_width(footer, 2) + margin});
  const int map_y = title_h + 8;
  const int height = map_y + std::max(map_h, 60) + 10 + (footer.empty() ? 0 : 24) + margin;
  Canvas canvas(width, height, kWhite);
  canvas.text(margin, 8, style.title, kBlack, 2);

  // The map, y upwards: row iy = 0 at the bottom.
  for (int iy = 0; iy < ny; ++iy)
    for (int ix = 0; ix < nx; ++ix) {
      const double v = shown[static_cast<std::size_t>(iy) * nx + ix];
      const Rgb c = std::isnan(v) ? kEmpty
                    : v == below  ? colour(style.colormap, 0.0)
                                  : colour(style.colormap, std::clamp((v - lo) / span, 0.0, 1.0));
      const int x0 = margin + ix * pixel, y0 = map_y + (ny - 1 - iy) * pixel;
      canvas.fill_rect(x0, y0, x0 + pixel - 1, y0 + pixel - 1, c);
    }
  canvas.rect(margin - 1, map_y - 1, margin + map_w, map_y + map_h, kBlack);

  // The colour bar, as tall as the map (at least 60 px), maximum at the top.
  const int bar_h = std::max(map_h, 60);
  for (int y = 0; y < bar_h; ++y) {
    const double t = 1.0 - static_cast<double>(y) / std::max(1, bar_h - 1);
    canvas.fill_rect(bar_x, map_y + y, bar_x + bar_w - 1, map_y + y,
                     have_range ? colour(style.colormap, t) : kEmpty);
  }
  canvas.rect(bar_x - 1, map_y - 1, bar_x + bar_w, map_y + bar_h, kBlack);
  const int lx = bar_x + bar_w + 8;
  canvas.text(lx, map_y, hi_label, kBlack, 2);
  canvas.text(lx, map_y + bar_h / 2 - Canvas::text_height(2) / 2, mid_label, kBlack, 2);
  canvas.text(lx, map_y + bar_h - Canvas::text_height(2), lo_label, kBlack, 2);
  if (!footer.empty()) canvas.text(margin, map_y + bar_h + 12, footer, kBlack, 2);
  canvas.write_png(path);
}

void write_spectrum_png(const std::string& path, const std::vector<double>& wavelength,
                        const std::vector<double>& flux, const std::string& x_label,
                        const std::string& y_label, const std::string& title) {
  if (wavelength.size() != flux.size() || wavelength.size() < 2)
    throw std::invalid_argument(
        path + ": spectrum needs as many (>= 2) wavelengths as fluxes, has " +
        std::to_string(wavelength.size()) + " and " + std::to_string(flux.size()));
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (std::size_t i = 0; i < flux.size(); ++i) {
    if (!std::isfinite(wavelength[i]) || !std::isfinite(flux[i])) continue;
    x_lo = std::min(x_lo, wavelength[i]);
    x_hi = std::max(x_hi, wavelength[i]);
    y_lo = std::min(y_lo, flux[i]);
    y_hi = std::max(y_hi, flux[i]);
  }
  if (!(x_lo < x_hi))
    throw std::invalid_argument(path +
                                ": spectrum has fewer than two finite points at distinct "
                                "wavelengths");
  if (y_hi == y_lo) {
    const double pad = y_lo == 0 ? 1.0 : 0.1 * std::abs(y_lo);
    y_lo -= pad;
    y_hi += pad;
  } else {
    const double pad = 0.05 * (y_hi - y_lo);
    y_lo -= pad;
    y_hi += pad;
  }

  const int width = 900, height = 520, text = 2;
  double x_step = 0, y_step = 0;
  const auto x_ticks = nice_ticks(x_lo, x_hi, 7, x_step);
  const auto y_ticks = nice_ticks(y_lo, y_hi, 6, y_step);
  const auto x_labels = tick_labels(x_ticks, x_step), y_labels = tick_labels(y_ticks, y_step);
  int y_label_w = 0;
  for (const auto& s : y_labels) y_label_w = std::max(y_label_w, Canvas::text_width(s, text));
  const int left = 14 + Canvas::text_height(text) + 12 + y_label_w + 10;
  const int right = 30, top = 40, bottom = 30 + 2 * Canvas::text_height(text) + 14;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  auto px = [&](double x) {
    return left + static_cast<int>(std::lround((x - x_lo) / (x_hi - x_lo) * (plot_w - 1)));
  };
  auto py = [&](double y) {
    return top + plot_h - 1 -
           static_cast<int>(std::lround((y - y_lo) / (y_hi - y_lo) * (plot_h - 1)));
  };

  Canvas canvas(width, height, kWhite);
  canvas.text((width - Canvas::text_width(title, text)) / 2, 12, title, kBlack, text);
  for (std::size_t i = 0; i < x_ticks.size(); ++i) {
    const int x = px(x_ticks[i]);
    canvas.line(x, top, x, top + plot_h - 1, kGrid);
    canvas.line(x, top + plot_h - 1, x, top + plot_h + 4, kBlack);
    const std::string& s = x_labels[i];
    canvas.text(x - Canvas::text_width(s, text) / 2, top + plot_h + 8, s, kBlack, text);
  }
  for (std::size_t i = 0; i < y_ticks.size(); ++i) {
    const int y = py(y_ticks[i]);
    canvas.line(left, y, left + plot_w - 1, y, kGrid);
    canvas.line(left - 5, y, left, y, kBlack);
    const std::string& s = y_labels[i];
    canvas.text(left - 8 - Canvas::text_width(s, text), y - Canvas::text_height(text) / 2, s,
                kBlack, text);
  }
  canvas.rect(left, top, left + plot_w - 1, top + plot_h - 1, kBlack);
  canvas.text(left + (plot_w - Canvas::text_width(x_label, text)) / 2,
              height - 14 - Canvas::text_height(text), x_label, kBlack, text);
  canvas.text(14, top + (plot_h + Canvas::text_width(y_label, text)) / 2, y_label, kBlack, text,
              true);

  bool have_previous = false;
  int prev_x = 0, prev_y = 0;
  for (std::size_t i = 0; i < flux.size(); ++i) {
    if (!std::isfinite(wavelength[i]) || !std::isfinite(flux[i])) {
      have_previous = false;
      continue;
    }
    const int x = px(wavelength[i]), y = py(flux[i]);
    // Two pixels thick, so that the line stays visible when the PNG is scaled down.
    for (int dy = 0; dy < 2; ++dy) {
      if (have_previous)
        canvas.line(prev_x, prev_y + dy, x, y + dy, kLine);
      else
        canvas.set(x, y + dy, kLine);
    }
    have_previous = true;
    prev_x = x;
    prev_y = y;
  }
  canvas.write_png(path);
}

std::vector<double> integrated_spectrum(const Cube& cube) {
  const auto& s = cube.shape;
  const auto n_wave = static_cast<std::size_t>(s.n_wave);
  const std::size_t n_spaxels = s.n_spaxels();
  // On all threads (one pass over a 2.7 GB cube on MUSE-WFM): a fixed number of runs of spaxels,
  // each summed in order, then the runs' sums added in order, so the spectrum does not depend on
  // the thread count.
  constexpr std::size_t kRuns = 64;
  std::vector<double> partial(kRuns * n_wave, 0.0);
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < static_cast<long long>(kRuns); ++r) {
    double* sum = partial.data() + static_cast<std::size_t>(r) * n_wave;
    const std::size_t begin = n_spaxels * static_cast<std::size_t>(r) / kRuns;
    const std::size_t end = n_spaxels * static_cast<std::size_t>(r + 1) / kRuns;
    for (std::size_t sp = begin; sp < end; ++sp)
      for (std::size_t k = 0; k < n_wave; ++k)
        if (const double v = cube.data[sp * n_wave + k]; !std::isnan(v)) sum[k] += v;
  }
  std::vector<double> spectrum(n_wave, 0.0);
  for (std::size_t r = 0; r < kRuns; ++r)
    for (std::size_t k = 0; k < n_wave; ++k) spectrum[k] += partial[r * n_wave + k];
  return spectrum;
}

std::vector<double> wavelength_angstrom(const Cube& cube) {
  std::vector<double> w(static_cast<std::size_t>(cube.shape.n_wave));
  for (int k = 0; k < cube.shape.n_wave; ++k) w[k] = cube.axes.wavelength_angstrom(k);
  return w;
}

}  // namespace ifusim
