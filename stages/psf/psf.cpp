#include "stages/psf/psf.h"

#include <fftw3.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "data/host_memory.h"
#include "data/resolution_curve_json.h"
#include "stages/common/convolution.h"

namespace ifusim {

PsfParams PsfParams::from_json(JsonParams p) {
  PsfParams out;
  out.shape = p.choice("shape", {"gaussian", "moffat"}, "gaussian") == "moffat" ? Shape::moffat
                                                                                : Shape::gaussian;
  out.fwhm_arcsec = parse_resolution_curve(p, "fwhm_arcsec", "fwhm_arcsec", false);
  if (out.shape == Shape::moffat) {
    if (p.has("beta")) {
      out.beta = parse_resolution_curve(p, "beta", "beta", false);
      // beta <= 1: the profile's integral diverges.
      p.require(out.beta.min() > 1.0, "beta",
                "a number > 1 (the Moffat profile's total must be finite) or a table of such "
                "values",
                p.raw("beta"));
    }
    const long long n = p.integer("supersample", 5);
    p.require(n >= 1 && n <= 64, "supersample", "an integer in [1, 64]", n);
    out.supersample = static_cast<int>(n);
  } else {
    for (const char* key : {"beta", "supersample"})
      if (p.has(key))
        throw ConfigError(p.key_path(key) + ": only valid with \"shape\": \"moffat\"");
  }
  out.truncate_peak_fraction = p.number("truncate_peak_fraction", 1e-6);
  p.require(out.truncate_peak_fraction > 0.0 && out.truncate_peak_fraction < 0.5,
            "truncate_peak_fraction", "a number in (0, 0.5)", out.truncate_peak_fraction);
  out.margin_light_fraction = p.number("margin_light_fraction", out.margin_light_fraction);
  p.require(out.margin_light_fraction > 0.0 && out.margin_light_fraction < 0.5,
            "margin_light_fraction", "a number in (0, 0.5)", out.margin_light_fraction);
  p.finish();
  return out;
}

Kernel2D moffat_pixel_kernel(const PsfParams& params, double fwhm_arcsec, double beta,
                             double spaxel_arcsec, int max_radius) {
  const double alpha =
      fwhm_arcsec / (2.0 * std::sqrt(std::pow(2.0, 1.0 / beta) - 1.0)) / spaxel_arcsec;
  const double reach_spaxels =
      alpha * std::sqrt(std::pow(params.truncate_peak_fraction, -1.0 / beta) - 1.0);
  Kernel2D k;
  const int full_radius = static_cast<int>(std::ceil(reach_spaxels));
  k.radius = std::min(full_radius, std::max(max_radius, 0));
  const int side = 2 * k.radius + 1;
  k.weights.assign(static_cast<std::size_t>(side) * side, 0.0);
  const int n = params.supersample;
  const double inv_alpha2 = 1.0 / (alpha * alpha);
  const double reach2 = reach_spaxels * reach_spaxels;
  // Every weight of the whole kernel is computed for its total (summed by row, then in row
  // order: the same for any thread count); those within the cap are kept.
  std::vector<double> row_total(2 * static_cast<std::size_t>(full_radius) + 1, 0.0);
#pragma omp parallel for schedule(static)
  for (int dy = -full_radius; dy <= full_radius; ++dy)
    for (int dx = -full_radius; dx <= full_radius; ++dx) {
      // Circular truncation on the spaxel centre's distance.
      if (static_cast<double>(dx) * dx + static_cast<double>(dy) * dy > reach2) continue;
      double sum = 0.0;
      for (int sy = 0; sy < n; ++sy) {
        const double y = dy - 0.5 + (sy + 0.5) / n;
        for (int sx = 0; sx < n; ++sx) {
          const double x = dx - 0.5 + (sx + 0.5) / n;
          sum += std::pow(1.0 + (x * x + y * y) * inv_alpha2, -beta);
        }
      }
      row_total[dy + full_radius] += sum / (n * n);
      if (std::abs(dx) <= k.radius && std::abs(dy) <= k.radius)
        k.weights[static_cast<std::size_t>(dy + k.radius) * side + dx + k.radius] = sum / (n * n);
    }
  k.sum = 0.0;
  for (double t : row_total) k.sum += t;
  return k;
}

int psf_margin_spaxels(const PsfParams& params, double spaxel_arcsec) {
  const double f = params.margin_light_fraction;
  // The widest PSF over the band: the largest FWHM and, for the Moffat, the smallest beta (the
  // widest wings). Taken separately they bound the radius at every wavelength, whether or not
  // they occur at the same one.
  const double fwhm_arcsec = params.fwhm_arcsec.max();
  double light_radius, kernel_radius;  // in spaxels
  if (params.shape == PsfParams::Shape::gaussian) {
    // Light outside radius r of a 2-D Gaussian: exp(-r^2 / 2 sigma^2).
    const double sigma = fwhm_arcsec / std::sqrt(8.0 * std::log(2.0)) / spaxel_arcsec;
    light_radius = sigma * std::sqrt(-2.0 * std::log(f));
    kernel_radius = std::ceil(sigma * gaussian_truncation_sigmas(params.truncate_peak_fraction));
  } else {
    // Outside r of a Moffat: (1 + (r / alpha)^2)^(1 - beta).
    const double beta = params.beta.min();
    const double alpha =
        fwhm_arcsec / (2.0 * std::sqrt(std::pow(2.0, 1.0 / beta) - 1.0)) / spaxel_arcsec;
    light_radius = alpha * std::sqrt(std::pow(f, 1.0 / (1.0 - beta)) - 1.0);
    kernel_radius =
        std::ceil(alpha * std::sqrt(std::pow(params.truncate_peak_fraction, -1.0 / beta) - 1.0));
  }
  return static_cast<int>(std::min(std::ceil(light_radius), kernel_radius));
}

namespace {

// The smallest size >= n whose only prime factors are 2, 3 and 5 (FFTW's fastest sizes).
int fft_size(int n) {
  for (int m = std::max(n, 1);; ++m) {
    int r = m;
    for (int f : {2, 3, 5})
      while (r % f == 0) r /= f;
    if (r == 1) return m;
  }
}

using Complex = std::complex<double>;

// A py x px row-major complex plane in FFTW's aligned memory (fftw_malloc: every plane the
// plans below execute on has the alignment of the one they were made on).
class FftPlane {
 public:
  explicit FftPlane(std::size_t area)
      : data_(static_cast<Complex*>(fftw_malloc(area * sizeof(Complex)))), area_(area) {
    if (!data_) throw std::bad_alloc();
    std::fill(data_, data_ + area_, Complex(0.0));
  }
  FftPlane(const FftPlane&) = delete;
  FftPlane& operator=(const FftPlane&) = delete;
  ~FftPlane() { fftw_free(data_); }
  Complex* data() { return data_; }
  Complex& operator[](std::size_t i) { return data_[i]; }
  const Complex& operator[](std::size_t i) const { return data_[i]; }
  // FFTW's complex is two doubles, as std::complex<double> is (FFTW's manual, section 4.1.1).
  fftw_complex* fftw() { return reinterpret_cast<fftw_complex*>(data_); }

 private:
  Complex* data_;
  std::size_t area_;
};

// The 2-D FFT of a py x px plane (row-major) as two passes of contiguous 1-D transforms (FFTW,
// Frigo & Johnson 2005, Proc. IEEE 93, 216) with a transpose between them. forward() transforms
// the plane's first `rows` rows (the others must be zero), transposes it into `spectrum` (px x
// py: its row x is the plane's column x) and transforms the spectrum's rows; the spectrum stays
// transposed (a kernel's is made the same way, so the product of two is taken there). inverse()
// undoes that and gives back only the first `rows` rows (the rest of the plane is not touched).
// The plans are made once, with FFTW_ESTIMATE (FFTW_MEASURE picks its algorithm by timing, so
// the bits could change from run to run), under a lock (FFTW's planner is not thread-safe), then
// executed by any thread on its own planes (fftw_execute_dft is thread-safe). ESTIMATE's plan for
// strided column transforms was slow (2.7 ms a pass over a 384 x 384 plane, against 0.3 ms for
// contiguous rows and the transpose), hence the transposes. The inverse is unscaled: it
// multiplies by px py.
class PlaneFft {
 public:
  PlaneFft(int px, int py, int rows) : px_(px), py_(py), rows_(rows) {
    FftPlane probe(static_cast<std::size_t>(px) * py);
    const std::lock_guard<std::mutex> lock(planner_mutex());
    for (int i : {0, 1}) {
      const int sign = i == 0 ? FFTW_FORWARD : FFTW_BACKWARD;
      row_plans_[i] = fftw_plan_many_dft(1, &px, rows, probe.fftw(), nullptr, 1, px, probe.fftw(),
                                         nullptr, 1, px, sign, FFTW_ESTIMATE);
      column_plans_[i] = fftw_plan_many_dft(1, &py, px, probe.fftw(), nullptr, 1, py, probe.fftw(),
                                            nullptr, 1, py, sign, FFTW_ESTIMATE);
      if (!row_plans_[i] || !column_plans_[i]) throw std::runtime_error("psf: FFTW made no plan");
    }
  }
  PlaneFft(const PlaneFft&) = delete;
  PlaneFft& operator=(const PlaneFft&) = delete;
  ~PlaneFft() {
    const std::lock_guard<std::mutex> lock(planner_mutex());
    for (fftw_plan p : {row_plans_[0], row_plans_[1], column_plans_[0], column_plans_[1]})
      fftw_destroy_plan(p);
  }
  void forward(FftPlane& plane, FftPlane& spectrum) const {
    fftw_execute_dft(row_plans_[0], plane.fftw(), plane.fftw());
    // spectrum[x][y] = plane[y][x], zero for y >= rows.
    copy_transposed(plane.data(), px_, spectrum.data(), py_, rows_, px_);
    for (int x = 0; x < px_; ++x)
      std::fill(spectrum.data() + static_cast<std::size_t>(x) * py_ + rows_,
                spectrum.data() + static_cast<std::size_t>(x + 1) * py_, Complex(0.0));
    fftw_execute_dft(column_plans_[0], spectrum.fftw(), spectrum.fftw());
  }
  void inverse(FftPlane& spectrum, FftPlane& plane) const {
    fftw_execute_dft(column_plans_[1], spectrum.fftw(), spectrum.fftw());
    copy_transposed(spectrum.data(), py_, plane.data(), px_, px_, rows_);  // the first rows only
    fftw_execute_dft(row_plans_[1], plane.fftw(), plane.fftw());
  }

 private:
  // to[c][r] = from[r][c] for r < n_rows, c < n_cols (row strides given), in tiles of 32 x 32, so
  // that both stay in cache.
  static void copy_transposed(const Complex* from, std::size_t from_stride, Complex* to,
                              std::size_t to_stride, int n_rows, int n_cols) {
    constexpr int kTile = 32;
    for (int r0 = 0; r0 < n_rows; r0 += kTile)
      for (int c0 = 0; c0 < n_cols; c0 += kTile) {
        const int r1 = std::min(n_rows, r0 + kTile), c1 = std::min(n_cols, c0 + kTile);
        for (int c = c0; c < c1; ++c)
          for (int r = r0; r < r1; ++r)
            to[static_cast<std::size_t>(c) * to_stride + r] =
                from[static_cast<std::size_t>(r) * from_stride + c];
      }
  }
  static std::mutex& planner_mutex() {
    static std::mutex m;
    return m;
  }
  int px_, py_, rows_;
  fftw_plan row_plans_[2] = {nullptr, nullptr}, column_plans_[2] = {nullptr, nullptr};
};

// The Moffat's planes are taken this many pairs at a time (16 consecutive wavelengths): a
// spaxel's values of a batch are consecutive in the spaxel-major cube, a cache line of floats,
// so that gathering the planes and scattering them back reads and writes whole lines, not a line
// for each value (one pair at a time, those strided passes were 40% of the PSF's time).
constexpr int kMoffatPairsPerBatch = 8;

// The FFT's padded plane for a Moffat of `fwhm_arcsec` and `beta` on an nx x ny field: the
// kernel (its radius capped by the field), px x py (at least n + radius along each axis, so that
// the circular convolution has no wrap-around inside the field).
struct MoffatPlane {
  Kernel2D kernel;
  int rx = 0, ry = 0, px = 0, py = 0;
  std::size_t area() const { return static_cast<std::size_t>(px) * py; }
};
MoffatPlane moffat_plane(const PsfParams& params, double fwhm_arcsec, double beta,
                         double spaxel_arcsec, int nx, int ny) {
  MoffatPlane m;
  m.kernel = moffat_pixel_kernel(params, fwhm_arcsec, beta, spaxel_arcsec, std::max(nx, ny) - 1);
  m.rx = std::min(m.kernel.radius, nx - 1);
  m.ry = std::min(m.kernel.radius, ny - 1);
  m.px = fft_size(nx + m.rx);
  m.py = fft_size(ny + m.ry);
  return m;
}

// The Moffat is not separable and its kernel is wide (14 FWHM at beta = 2.5), so a direct sum
// costs n_spaxels x n_taps per plane: it is done as out = K * in / K.sum with FFTs, zero-padded
// (moffat_plane). Two real planes go through one complex transform (the kernel is real: the real
// part is one plane's result, the imaginary part the other's). Each pair of planes is
// independent, so the result does not depend on the thread count. In place: a batch's planes
// are read whole before any is written back. Rounding: ~1e-16 of a plane's largest value (so far
// from all sources a voxel may come out as, e.g., -1e-17 of the peak rather than 0).
//
// With `transpose`, the adjoint (docs/gradients.md): the correlation with the same taps, i.e. the
// convolution with the kernel mirrored, K(-dx, -dy) (the same FFT, the same zero padding).
template <class T>
void apply_moffat(const PsfParams& params, double fwhm_arcsec, double beta, double spaxel_arcsec,
                  const CubeShape& shape, std::vector<T>& data, bool transpose) {
  const int nx = shape.nx, ny = shape.ny, n_wave = shape.n_wave;
  const MoffatPlane m = moffat_plane(params, fwhm_arcsec, beta, spaxel_arcsec, nx, ny);
  const int px = m.px, py = m.py;
  const std::size_t area = m.area();
  // The kernel's transform, with the convolution's normalisation (the whole kernel's total is 1)
  // and the inverse's 1 / (px py) folded in.
  const double scale = 1.0 / (m.kernel.sum * static_cast<double>(area));
  FftPlane kernel_plane(area), kernel_ft(area);
  for (int dy = -m.ry; dy <= m.ry; ++dy)
    for (int dx = -m.rx; dx <= m.rx; ++dx)
      kernel_plane[static_cast<std::size_t>((dy + py) % py) * px + (dx + px) % px] =
          scale * (transpose ? m.kernel.at(-dx, -dy) : m.kernel.at(dx, dy));
  PlaneFft(px, py, py).forward(kernel_plane, kernel_ft);

  const PlaneFft fft(px, py, ny);
  const int pairs = (n_wave + 1) / 2;
  const int batches = (pairs + kMoffatPairsPerBatch - 1) / kMoffatPairsPerBatch;
  const std::size_t n_spaxels = static_cast<std::size_t>(nx) * ny;
#pragma omp parallel
  {
    std::vector<std::unique_ptr<FftPlane>> planes;
    for (int i = 0; i < kMoffatPairsPerBatch; ++i)
      planes.push_back(std::make_unique<FftPlane>(area));
    FftPlane spectrum(area);
#pragma omp for schedule(static)
    for (int b = 0; b < batches; ++b) {
      const int k_begin = 2 * kMoffatPairsPerBatch * b;
      const int k_end = std::min(n_wave, k_begin + 2 * kMoffatPairsPerBatch);
      const int n_pairs = (k_end - k_begin + 1) / 2;
      // The field's rows' padding is zero (the last batch's inverse left values there; the rows
      // below the field are never read).
      for (int i = 0; i < n_pairs; ++i)
        for (int y = 0; y < ny; ++y)
          std::fill(planes[i]->data() + static_cast<std::size_t>(y) * px + nx,
                    planes[i]->data() + static_cast<std::size_t>(y + 1) * px, Complex(0.0));
      for (std::size_t s = 0; s < n_spaxels; ++s) {
        const std::size_t at = (s / nx) * px + s % nx;
        const T* src = data.data() + s * n_wave;
        for (int k = k_begin; k < k_end; k += 2)
          (*planes[(k - k_begin) / 2])[at] = Complex(src[k], k + 1 < k_end ? src[k + 1] : 0.0);
      }
      for (int i = 0; i < n_pairs; ++i) {
        fft.forward(*planes[i], spectrum);
        for (std::size_t j = 0; j < area; ++j) spectrum[j] *= kernel_ft[j];
        fft.inverse(spectrum, *planes[i]);
      }
      for (std::size_t s = 0; s < n_spaxels; ++s) {
        const std::size_t at = (s / nx) * px + s % nx;
        T* dst = data.data() + s * n_wave;
        for (int k = k_begin; k < k_end; k += 2) {
          const Complex v = (*planes[(k - k_begin) / 2])[at];
          dst[k] = static_cast<T>(v.real());
          if (k + 1 < k_end) dst[k + 1] = static_cast<T>(v.imag());
        }
      }
    }
  }
}

double gaussian_sigma_spaxels(double fwhm_arcsec, double spaxel_arcsec) {
  return fwhm_arcsec / std::sqrt(8.0 * std::log(2.0)) / spaxel_arcsec;
}

template <class T>
void apply_gaussian(const PsfParams& params, double fwhm_arcsec, double spaxel_arcsec,
                    const CubeShape& shape, std::vector<T>& data, bool transpose) {
  const double sigma_spaxels = gaussian_sigma_spaxels(fwhm_arcsec, spaxel_arcsec);
  const int nx = shape.nx, ny = shape.ny;
  const std::size_t n_wave = static_cast<std::size_t>(shape.n_wave);
  // Separable: the pixel-integrated 2-D Gaussian is the product of two 1-D kernels, each
  // normalised to 1, so two zero-padded 1-D passes give the zero-padded 2-D convolution. Both
  // passes work in place (no second cube).
  const std::vector<Kernel1D> along_x = {
      gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, nx - 1)};
  const std::vector<Kernel1D> along_y = {
      gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, ny - 1)};
  if constexpr (std::is_same_v<T, double>) {
    if (transpose) {
      // The transpose of (y pass after x pass): the x pass's transpose after the y pass's.
      correlate_axis_in_place(data, 1, ny, static_cast<std::size_t>(nx) * n_wave, along_y);
      correlate_axis_in_place(data, ny, nx, n_wave, along_x);
      return;
    }
  }
  // Along x: layout (iy, ix, k).
  convolve_axis_in_place(data, ny, nx, n_wave, along_x);
  // Along y: layout (1, iy, ix * k).
  convolve_axis_in_place(data, 1, ny, static_cast<std::size_t>(nx) * n_wave, along_y);
}

// apply_psf on the values of a cube of `shape`: the float cube, or a double tangent or (with
// `transpose`, double only) cotangent.
template <class T>
void apply_psf_to(const PsfParams& params, double spaxel_arcsec,
                  const std::vector<double>& plane_wavelength_angstrom, const CubeShape& shape,
                  std::vector<T>& data, bool transpose) {
  if (data.size() != shape.n_voxels() ||
      plane_wavelength_angstrom.size() != static_cast<std::size_t>(shape.n_wave))
    throw std::logic_error("psf: the cube's data or wavelengths do not match its shape");
  if (data.empty()) return;
  const bool moffat = params.shape == PsfParams::Shape::moffat;
  auto apply = [&](double fwhm_arcsec, double beta, const CubeShape& planes_shape,
                   std::vector<T>& planes) {
    if (moffat)
      apply_moffat(params, fwhm_arcsec, beta, spaxel_arcsec, planes_shape, planes, transpose);
    else
      apply_gaussian(params, fwhm_arcsec, spaxel_arcsec, planes_shape, planes, transpose);
  };
  if (params.fwhm_arcsec.constant() && (!moffat || params.beta.constant())) {
    apply(params.fwhm_arcsec.fwhm.front(), params.beta.fwhm.front(), shape, data);
    return;
  }
  // A FWHM or a Moffat beta that varies with wavelength: the planes are grouped by (FWHM, beta),
  // each rounded to steps of 1e-3 (relative; 0.05% at most from its curve), and each group's
  // planes are convolved with its own kernel. A Gaussian ignores beta. (Each group acts on its own
  // planes only, so the transpose is each group's transpose.)
  const double step = std::log1p(1e-3);
  auto key_of = [&](const ResolutionCurve& curve, double lambda) {
    return std::llround(std::log(curve.at(lambda)) / step);
  };
  std::map<std::pair<long long, long long>, std::vector<int>> groups;
  for (int k = 0; k < shape.n_wave; ++k) {
    const double lambda = plane_wavelength_angstrom[k];
    groups[{key_of(params.fwhm_arcsec, lambda), moffat ? key_of(params.beta, lambda) : 0}]
        .push_back(k);
  }
  const std::size_t n_spaxels = shape.n_spaxels(), n_wave = shape.n_wave;
  if (!moffat) {
    // A Gaussian: separable, and the same at every spaxel, so each plane can take its group's
    // kernel in the same two in-place passes over the whole cube (convolve_axis_in_place_by_lane):
    // the same sums as convolving each group gathered on its own, without the gathering and
    // scattering (four more passes over the cube, ~140 groups on MUSE-WFM).
    std::vector<Kernel1D> along_x, along_y;
    std::vector<int> kernel_of_plane(n_wave);
    for (const auto& [key, planes] : groups) {
      const double sigma_spaxels =
          gaussian_sigma_spaxels(std::exp(static_cast<double>(key.first) * step), spaxel_arcsec);
      along_x.push_back(
          gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, shape.nx - 1));
      along_y.push_back(
          gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, shape.ny - 1));
      for (int k : planes) kernel_of_plane[k] = static_cast<int>(along_x.size()) - 1;
    }
    const std::size_t x_rows = static_cast<std::size_t>(shape.ny);
    const std::size_t y_inner = static_cast<std::size_t>(shape.nx) * n_wave;
    if constexpr (std::is_same_v<T, double>) {
      if (transpose) {
        correlate_axis_in_place_by_lane(data, 1, shape.ny, y_inner, along_y, kernel_of_plane);
        correlate_axis_in_place_by_lane(data, x_rows, shape.nx, n_wave, along_x, kernel_of_plane);
        return;
      }
    }
    convolve_axis_in_place_by_lane(data, x_rows, shape.nx, n_wave, along_x, kernel_of_plane);
    convolve_axis_in_place_by_lane(data, 1, shape.ny, y_inner, along_y, kernel_of_plane);
    return;
  }
  // A Moffat: each group gathered into one buffer (the largest group's), by all threads, and
  // scattered back.
  std::size_t largest = 0;
  for (const auto& entry : groups) largest = std::max(largest, entry.second.size());
  std::vector<T> group;
  group.reserve(n_spaxels * largest);
  for (const auto& [key, planes] : groups) {
    const std::size_t m = planes.size();
    const CubeShape group_shape{shape.nx, shape.ny, static_cast<int>(m)};
    group.resize(n_spaxels * m);
#pragma omp parallel for schedule(static)
    for (long long s = 0; s < static_cast<long long>(n_spaxels); ++s)
      for (std::size_t i = 0; i < m; ++i) group[s * m + i] = data[s * n_wave + planes[i]];
    apply(std::exp(static_cast<double>(key.first) * step),
          std::exp(static_cast<double>(key.second) * step), group_shape, group);
#pragma omp parallel for schedule(static)
    for (long long s = 0; s < static_cast<long long>(n_spaxels); ++s)
      for (std::size_t i = 0; i < m; ++i) data[s * n_wave + planes[i]] = group[s * m + i];
  }
}

}  // namespace

void apply_psf(const PsfParams& params, double spaxel_arcsec,
               const std::vector<double>& plane_wavelength_angstrom, Cube& cube) {
  apply_psf_to(params, spaxel_arcsec, plane_wavelength_angstrom, cube.shape, cube.data, false);
}

void apply_psf(const PsfParams& params, double spaxel_arcsec,
               const std::vector<double>& plane_wavelength_angstrom, const CubeShape& shape,
               std::vector<double>& values, bool transpose) {
  apply_psf_to(params, spaxel_arcsec, plane_wavelength_angstrom, shape, values, transpose);
}

namespace {

class PsfStage final : public Stage {
 public:
  PsfStage(PsfParams params, std::string path) : params_(params), path_(std::move(path)) {}
  std::string name() const override { return "psf"; }
  std::vector<std::string> needs() const override { return {"cube"}; }
  std::vector<Provided> provides() const override {
    return {{"cube_psf", "", "every wavelength plane convolved with the PSF"}};
  }
  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    // The Gaussian convolves in place (buffers of ~1 MB per thread); so does the Moffat, with its
    // FFT planes, for the widest kernel. A FWHM or
    // beta that varies with wavelength also gathers each group of planes into one buffer (at most
    // the cube).
    if (params_.shape == PsfParams::Shape::gaussian) return {};
    const double spaxel_arcsec = c.observation.axes.spaxel_arcsec;
    if (!(spaxel_arcsec > 0.0) || c.n_spaxels == 0) return {};  // run() says why
    const int side = static_cast<int>(std::llround(std::sqrt(static_cast<double>(c.n_spaxels))));
    const MoffatPlane widest = moffat_plane(params_, params_.fwhm_arcsec.max(), params_.beta.min(),
                                            spaxel_arcsec, side, side);
    // A thread's planes and its spectrum, and the kernel's plane and spectrum.
    const auto planes =
        static_cast<std::size_t>(omp_get_max_threads() * (kMoffatPairsPerBatch + 1) + 2);
    std::vector<MemoryItem> items = {
        {"Moffat FFT planes (host)", planes * widest.area() * sizeof(Complex), false, ""}};
    if (!params_.fwhm_arcsec.constant() || !params_.beta.constant())
      items.push_back({"a group of planes of one (FWHM, beta) (float, host; with the cube)",
                       c.n_voxels() * sizeof(float), false, ""});
    return items;
  }

  CubeMargin margin(const Observation& obs) const override {
    if (!(obs.axes.spaxel_arcsec > 0.0)) return {};  // run() says why
    return {psf_margin_spaxels(params_, obs.axes.spaxel_arcsec), 0};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("psf: no cube (psum must run first)");
    const double spaxel_arcsec = state.observation.axes.spaxel_arcsec;
    if (!(spaxel_arcsec > 0.0))
      throw ConfigError("psf (" + path_ + "): the observation's spaxel size is " +
                        std::to_string(spaxel_arcsec) + " arcsec; expected a number > 0");
    if (!state.cube->variance.empty())
      throw ConfigError("psf (" + path_ +
                        "): the cube already has noise; put the noise stage "
                        "after psf (convolving noise would correlate it)");
    refuse_cropped_cube(state, "psf (" + path_ + ")");
    std::vector<double> wavelength(static_cast<std::size_t>(state.cube->shape.n_wave));
    for (int k = 0; k < state.cube->shape.n_wave; ++k)
      wavelength[k] =
          state.observation.axes.wavelength_angstrom(k - state.observation.margin.wavelengths);
    apply_psf(params_, spaxel_arcsec, wavelength, *state.cube);
    spaxel_arcsec_ = spaxel_arcsec;
    wavelength_ = std::move(wavelength);
    shape_ = state.cube->shape;
  }

  // The transpose of each plane's convolution: the correlation with the same kernel, the field's
  // edges zero-padded as in the forward (docs/gradients.md).
  bool adjoint(const RunState&, CubeCotangent& cotangent) const override {
    check_cotangent_shape("psf", shape_, cotangent);
    apply_psf(params_, spaxel_arcsec_, wavelength_, shape_, cotangent.values_to_change(), true);
    return true;
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("psf", shape_, tangent);
    apply_psf(params_, spaxel_arcsec_, wavelength_, shape_, tangent.values_to_change(), false);
    return true;
  }

 private:
  PsfParams params_;
  std::string path_;
  // What run() applied, for the adjoint.
  double spaxel_arcsec_ = 0.0;
  std::vector<double> wavelength_;  // of each plane
  CubeShape shape_;
};

}  // namespace

std::unique_ptr<Stage> make_psf_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<PsfStage>(PsfParams::from_json(JsonParams(params, path)), path);
}

StageEntry psf_stage() {
  return {.name = "psf",
          .summary = "convolve every wavelength plane with a Gaussian or Moffat PSF",
          .kind = StageKind::cube,
          .make = &from_params<&make_psf_stage>,
          .inherits = {{"fwhm_arcsec", "telescope.psf_fwhm_arcsec"}},
          .examples = {{{"fwhm_arcsec", 0.8}},
                       {{"fwhm_arcsec", 0.8}, {"shape", "moffat"}, {"beta", 2.5}}}};
}

}  // namespace ifusim
