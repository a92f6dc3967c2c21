// Spectral-core kernels: one source, compiled by stellar_spectra_cpu.cpp and _cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// Bins handled by one thread: a star's spectrum is split across threads in chunks of this many
// observed bins, so that a GPU has N_stars * n_chunks independent work items.
inline constexpr int kBinsPerChunk = 32;

// Position of x in an ascending table of n values: the lower node and the weight of the upper
// one. Outside the table: clamped to the end node, and *outside is set.
IFUSIM_HD inline void bracket(const double* table, int n, double x, int& lower,
                              double& upper_weight, bool& outside) {
  if (n == 1 || !(x > table[0])) {
    outside = outside || x < table[0] || x != x;
    lower = 0;
    upper_weight = 0.0;
    return;
  }
  if (x >= table[n - 1]) {
    outside = outside || x > table[n - 1];
    lower = n - 2;
    upper_weight = 1.0;
    return;
  }
  int lo = 0, hi = n - 1;  // table[lo] <= x < table[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (table[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  lower = lo;
  upper_weight = (x - table[lo]) / (table[lo + 1] - table[lo]);
}

// The four grid nodes of one star and their bilinear weights (in log age, log Z).
struct NodeWeights {
  int node[4];
  double weight[4];
  bool skip;  // outside the grid under the "zero" policy
};

IFUSIM_HD inline NodeWeights node_weights(const SspView& ssp, double age_gyr, double metallicity) {
  // Ages and metallicities <= 0 are below any grid: log10 of a tiny value clamps them.
  const double log_age = log10(age_gyr > 1e-12 ? age_gyr : 1e-12);
  const double log_z = log10(metallicity > 1e-12 ? metallicity : 1e-12);
  int ia = 0, iz = 0;
  double wa = 0.0, wz = 0.0;
  bool outside = false;
  bracket(ssp.log_age, ssp.n_age, log_age, ia, wa, outside);
  bracket(ssp.log_z, ssp.n_z, log_z, iz, wz, outside);
  const int ia1 = ssp.n_age > 1 ? ia + 1 : ia, iz1 = ssp.n_z > 1 ? iz + 1 : iz;
  NodeWeights w;
  w.node[0] = ia * ssp.n_z + iz;
  w.node[1] = ia * ssp.n_z + iz1;
  w.node[2] = ia1 * ssp.n_z + iz;
  w.node[3] = ia1 * ssp.n_z + iz1;
  w.weight[0] = (1 - wa) * (1 - wz);
  w.weight[1] = (1 - wa) * wz;
  w.weight[2] = wa * (1 - wz);
  w.weight[3] = wa * wz;
  w.skip = outside && ssp.outside == OutsideGrid::zero;
  return w;
}

// Pixel j with edges[j] <= lambda < edges[j + 1] and the fraction of it below lambda; lambda
// outside the table gives j = -1 (below) or n_wave (above).
IFUSIM_HD inline void locate(const SspView& ssp, double lambda, int& j, double& fraction) {
  const int n = ssp.n_wave;
  if (!(lambda > ssp.edges[0])) {
    j = -1;
    fraction = 0.0;
    return;
  }
  if (lambda >= ssp.edges[n]) {
    j = n;
    fraction = 0.0;
    return;
  }
  if (ssp.uniform) {
    j = static_cast<int>((lambda - ssp.edge0) / ssp.step);
    j = j < 0 ? 0 : (j >= n ? n - 1 : j);
  } else {
    int lo = 0, hi = n;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (ssp.edges[mid] <= lambda)
        lo = mid;
      else
        hi = mid;
    }
    j = lo;
  }
  fraction = (lambda - ssp.edges[j]) / (ssp.edges[j + 1] - ssp.edges[j]);
}

// Cumulative energy of one template up to lambda, from its located pixel.
IFUSIM_HD inline double cumulative_at(const SspView& ssp, int node, int j, double fraction) {
  const double* c = ssp.cumulative + static_cast<std::size_t>(node) * (ssp.n_wave + 1);
  if (j < 0) return 0.0;
  if (j >= ssp.n_wave) return c[ssp.n_wave];
  return c[j] + fraction * (c[j + 1] - c[j]);
}

struct DepositSpectrumChunk {
  SspView ssp;
  WaveBins bins;
  double one_plus_z;
  StarViews stars;
  DustCurve dust;
  int n_chunks;
  double counts_per_unit;
  std::int64_t* cube_sums;

  IFUSIM_HD void operator()(std::size_t item) const {
    const std::size_t i = item / static_cast<std::size_t>(n_chunks);
    const int chunk = static_cast<int>(item % static_cast<std::size_t>(n_chunks));
    const std::int32_t spaxel = stars.spaxel_index[i];
    if (spaxel < 0) return;
    const double doppler = one_plus_z * (1.0 + stars.velocity_los_kms[i] / kSpeedOfLightKms);
    // Observed bins this chunk covers, cut to those the shifted spectrum reaches.
    const double first_edge = bins.start_angstrom - 0.5 * bins.step_angstrom;
    int k0 = chunk * kBinsPerChunk, k1 = k0 + kBinsPerChunk;
    k1 = k1 < bins.n ? k1 : bins.n;
    const double lo_bin = (ssp.edges[0] * doppler - first_edge) / bins.step_angstrom;
    const double hi_bin = (ssp.edges[ssp.n_wave] * doppler - first_edge) / bins.step_angstrom;
    if (hi_bin < k0 || lo_bin >= k1) return;
    if (lo_bin > k0) k0 = static_cast<int>(lo_bin);
    if (hi_bin + 1 < k1) k1 = static_cast<int>(hi_bin) + 1;

    const NodeWeights w = node_weights(ssp, stars.age_gyr[i], stars.metallicity[i]);
    if (w.skip) return;
    // Luminosity density per observed Angstrom = m * energy in the bin / bin width.
    const double scale = stars.initial_mass_msun[i] / bins.step_angstrom * counts_per_unit;
    std::int64_t* out = cube_sums + static_cast<std::size_t>(spaxel) * bins.n;

    int j = 0;
    double f = 0.0;
    locate(ssp, (first_edge + k0 * bins.step_angstrom) / doppler, j, f);
    double below[4];
    for (int n = 0; n < 4; ++n) below[n] = cumulative_at(ssp, w.node[n], j, f);
    const double a_v = stars.dust_av ? stars.dust_av[i] : 0.0;
    for (int k = k0; k < k1; ++k) {
      locate(ssp, (first_edge + (k + 1) * bins.step_angstrom) / doppler, j, f);
      double energy = 0.0;
      for (int n = 0; n < 4; ++n) {
        const double c = cumulative_at(ssp, w.node[n], j, f);
        energy += w.weight[n] * (c - below[n]);
        below[n] = c;
      }
      if (a_v > 0.0) {
        const double rest_centre = (bins.start_angstrom + k * bins.step_angstrom) / doppler;
        energy *= pow(10.0, -0.4 * a_v * attenuation_ratio(dust, rest_centre));
      }
      if (energy != 0.0) atomic_add_fixed(out + k, to_fixed(energy * scale, 1.0));
    }
  }
};

void accumulate_stellar_spectra(const Device& device, const SspView& ssp, const WaveBins& bins,
                                double redshift, const DustCurve& dust, const StarViews& stars,
                                double counts_per_unit, Span<std::int64_t> cube_sums) {
  const int n_chunks = (bins.n + kBinsPerChunk - 1) / kBinsPerChunk;
  parallel_for(device, stars.n * static_cast<std::size_t>(n_chunks),
               DepositSpectrumChunk{ssp, bins, 1.0 + redshift, stars, dust, n_chunks,
                                    counts_per_unit, cube_sums.data});
}

// Mass-weighted moments of the line-of-sight velocity per spaxel: sum m, sum m v, sum m v^2.
struct DepositMoments {
  StarViews stars;
  const float* mass_msun;
  double counts_per_unit;
  std::int64_t* moment_sums;
  IFUSIM_HD void operator()(std::size_t i) const {
    const std::int32_t s = stars.spaxel_index[i];
    if (s < 0) return;
    const double m = mass_msun[i], v = stars.velocity_los_kms[i];
    std::int64_t* out = moment_sums + static_cast<std::size_t>(s) * 3;
    atomic_add_fixed(out, to_fixed(m, counts_per_unit));
    atomic_add_fixed(out + 1, to_fixed(m * v, counts_per_unit));
    atomic_add_fixed(out + 2, to_fixed(m * v * v, counts_per_unit));
  }
};

void accumulate_kinematics(const Device& device, const StarViews& stars,
                           Span<const float> mass_msun, double counts_per_unit,
                           Span<std::int64_t> moment_sums) {
  parallel_for(device, stars.n,
               DepositMoments{stars, mass_msun.data, counts_per_unit, moment_sums.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
