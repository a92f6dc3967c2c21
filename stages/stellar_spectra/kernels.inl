// Spectral-core kernels: one source, compiled by stellar_spectra_cpu.cpp and _cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// Bins handled by one thread: a star's spectrum is split across threads in chunks of this many
// observed bins, so that a GPU has N_stars * n_chunks independent work items.
inline constexpr int kBinsPerChunk = 32;

// Adds (w, w u, w u^2) to a spaxel's three moment sums, u = v / velocity_unit, |u| <= 1 (the
// unit is the galaxy's speed bound): the three then share one fixed-point scale set by the
// bound on w alone, not on w v^2, which would make a faint star's w round to nothing.
IFUSIM_HD inline void add_moments(std::int64_t* sums, double w, double u, double counts_per_unit) {
  atomic_add_fixed(sums, to_fixed(w, counts_per_unit));
  atomic_add_fixed(sums + 1, to_fixed(w * u, counts_per_unit));
  atomic_add_fixed(sums + 2, to_fixed(w * u * u, counts_per_unit));
}

// Exact method: one star's spectrum over one chunk of observed bins.
struct DepositSpectrumChunk {
  SspView ssp;
  WaveBins bins;
  double one_plus_z;
  StarViews stars;
  DustCurve dust;
  int n_chunks;
  double counts_per_unit;
  std::int64_t* cube_sums;
  int band_first_bin, band_end_bin;  // bins whose energy weighs the light moments
  double light_counts_per_unit;
  std::int64_t* light_moment_sums;
  double velocity_unit_kms;

  IFUSIM_HD void operator()(std::size_t item) const {
    const std::size_t i = item / static_cast<std::size_t>(n_chunks);
    const int chunk = static_cast<int>(item % static_cast<std::size_t>(n_chunks));
    const double v = stars.velocity_los_kms[i];
    const double doppler = one_plus_z * (1.0 + v / kSpeedOfLightKms);
    // Observed bins this chunk covers, cut to those the shifted spectrum reaches (vacuum
    // wavelengths on both sides, see WaveBins): the others would receive exactly nothing.
    int k0 = chunk * kBinsPerChunk, k1 = k0 + kBinsPerChunk;
    k1 = k1 < bins.n ? k1 : bins.n;
    const double reach_lo = ssp.edges[0] * doppler, reach_hi = ssp.edges[ssp.n_wave] * doppler;
    if (bins.vacuum_edge(k1) <= reach_lo || bins.vacuum_edge(k0) >= reach_hi) return;
    while (bins.vacuum_edge(k0 + 1) <= reach_lo) ++k0;
    while (bins.vacuum_edge(k1 - 1) >= reach_hi) --k1;

    const NodeWeights w = node_weights(ssp, stars.age_gyr[i], stars.metallicity[i]);
    if (w.skip) return;
    // Energy (L_sun) of each bin of the chunk: m * sum_n w_n (C_n(l1 / D) - C_n(l0 / D)).
    double energy[kBinsPerChunk];
    int j = 0;
    double f = 0.0;
    locate(ssp, bins.vacuum_edge(k0) / doppler, j, f);
    double below[4];
    for (int n = 0; n < 4; ++n) below[n] = cumulative_at(ssp, w.node[n], j, f);
    const double mass = stars.initial_mass_msun[i];
    const double a_v = stars.dust_av ? stars.dust_av[i] : 0.0;
    double band_energy = 0.0;
    for (int k = k0; k < k1; ++k) {
      locate_after(ssp, bins.vacuum_edge(k + 1) / doppler, j, f);
      double e = 0.0;
      for (int n = 0; n < 4; ++n) {
        const double c = cumulative_at(ssp, w.node[n], j, f);
        e += w.weight[n] * (c - below[n]);
        below[n] = c;
      }
      if (a_v > 0.0) {
        const double rest_centre = bins.vacuum_centre(k) / doppler;
        e *= pow(10.0, -0.4 * a_v * attenuation_ratio(dust, rest_centre));
      }
      energy[k - k0] = mass * e;
      if (k >= band_first_bin && k < band_end_bin) band_energy += mass * e;
    }
    // Luminosity density per observed Angstrom = energy / bin width, into every spaxel the
    // star's light reaches.
    // (Linear bins share one width; logarithmic ones have each their own.)
    double scale[kBinsPerChunk];
    for (int k = k0; k < k1; ++k) scale[k - k0] = counts_per_unit / bins.width(k);
    stars.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
      std::int64_t* out = cube_sums + static_cast<std::size_t>(spaxel) * bins.n;
      for (int k = k0; k < k1; ++k)
        if (energy[k - k0] != 0.0)
          atomic_add_fixed(out + k, to_fixed(energy[k - k0] * weight * scale[k - k0], 1.0));
      if (band_energy != 0.0)
        add_moments(light_moment_sums + static_cast<std::size_t>(spaxel) * 3, band_energy * weight,
                    v / velocity_unit_kms, light_counts_per_unit);
    });
  }
};

void accumulate_stellar_spectra(const Device& device, const SspView& ssp, const WaveBins& bins,
                                double redshift, const DustCurve& dust, const StarViews& stars,
                                double counts_per_unit, Span<std::int64_t> cube_sums,
                                int band_first_bin, int band_end_bin, double light_counts_per_unit,
                                Span<std::int64_t> light_moment_sums, double velocity_unit_kms) {
  const int n_chunks = (bins.n + kBinsPerChunk - 1) / kBinsPerChunk;
  parallel_for(
      device, stars.n * static_cast<std::size_t>(n_chunks),
      DepositSpectrumChunk{ssp, bins, 1.0 + redshift, stars, dust, n_chunks, counts_per_unit,
                           cube_sums.data, band_first_bin, band_end_bin, light_counts_per_unit,
                           light_moment_sums.data, velocity_unit_kms});
}

// Mass-weighted moments of the line-of-sight velocity per spaxel: sum m, sum m v, sum m v^2.
struct DepositMassMoments {
  StarViews stars;
  double counts_per_unit;
  std::int64_t* moment_sums;
  double velocity_unit_kms;
  IFUSIM_HD void operator()(std::size_t i) const {
    const double m = stars.mass_msun[i], u = stars.velocity_los_kms[i] / velocity_unit_kms;
    stars.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
      add_moments(moment_sums + static_cast<std::size_t>(spaxel) * 3, m * weight, u,
                  counts_per_unit);
    });
  }
};

void accumulate_mass_moments(const Device& device, const StarViews& stars, double counts_per_unit,
                             Span<std::int64_t> moment_sums, double velocity_unit_kms) {
  parallel_for(device, stars.n,
               DepositMassMoments{stars, counts_per_unit, moment_sums.data, velocity_unit_kms});
}

// Binned method, at a template's end (EdgeWindow): the bin of the window that holds a star's
// step x = lambda_end D (its S column) and the fraction of that bin the continuation beyond the
// step covers (its P column); bin -1 when the continuation covers none of the window.
struct EdgeStep {
  int bin = -1;
  double fraction = 0.0;
};

IFUSIM_HD inline EdgeStep edge_step(const WaveBins& bins, const EdgeWindow& window, double x) {
  const int first = window.first_bin, end = window.first_bin + window.n_bins;
  const double lo = bins.vacuum_edge(first), hi = bins.vacuum_edge(end);
  // Outside the window only where it was cut at the band's ends: all of it, or none.
  if (window.red ? x >= hi : x <= lo) return {};
  if (window.red && x < lo) return {first, 1.0};
  if (!window.red && x > hi) return {end - 1, 1.0};
  const int a = bins.vacuum_bin(x, first, end);
  const double e0 = bins.vacuum_edge(a), e1 = bins.vacuum_edge(a + 1);
  return {a, window.red ? (e1 - x) / (e1 - e0) : (x - e0) / (e1 - e0)};
}

// d(fraction)/dx of edge_step (reverse mode): +-1 / (the bin's width) where the step is inside the
// window, from the right at a bin's edge (vacuum_bin's bin); 0 where the window is all or none.
IFUSIM_HD inline double edge_step_fraction_slope(const WaveBins& bins, const EdgeWindow& window,
                                                 double x) {
  const int first = window.first_bin, end = window.first_bin + window.n_bins;
  const double lo = bins.vacuum_edge(first), hi = bins.vacuum_edge(end);
  if (window.red ? x >= hi : x <= lo) return 0.0;
  if (window.red && x < lo) return 0.0;
  if (!window.red && x > hi) return 0.0;
  const int a = bins.vacuum_bin(x, first, end);
  const double width = bins.vacuum_edge(a + 1) - bins.vacuum_edge(a);
  return window.red ? -1.0 / width : 1.0 / width;
}

// Binned method: a star's initial mass x bilinear node weights x cloud-in-cell velocity weights,
// and (with dust) x the dust expansion's weights at its A_V, for every spaxel of the tile its
// light reaches: f(index, mass) with index = row * columns + column into the tile's histogram
// (8 entries a spaxel, 8 x rank with dust, some of them 0), and the S and P entries of each
// template end with a window (2 more, 2 x rank with dust).
// With `prefetch` (the dense deposit's, on the host): prefetch(index) for the next spaxel's SSP
// nodes' entries before each spaxel's of a smoothed footprint are made, so that the next row of
// the tile (megabytes away) is on its way while this one is written. A smoothed MaNGA-32 run's
// (1e6 stars + 1e5 gas, calc_ifu_gas) deposit spent 62% of its samples waiting on the adds; with
// the prefetch its stage took 3.1-3.3 s against 3.4-3.8 s (three pairs, the 2-core VM).
struct NoPrefetch {
  IFUSIM_HD void operator()(std::size_t) const {}
};
template <class F, class P = NoPrefetch>
IFUSIM_HD void for_each_histogram_entry(const SspView& ssp, const WaveBins& bins,
                                        const StarViews& stars, const HistogramTile& tile,
                                        std::size_t i, F&& f, P prefetch = {}) {
  const NodeWeights w = node_weights(ssp, stars.age_gyr[i], stars.metallicity[i]);
  if (w.skip) return;
  const double v = stars.velocity_los_kms[i];
  int jv = 0;
  double tv = 0.0;
  tile.velocity.locate(v, jv, tv);
  const DustExpansionView& dust = tile.dust;
  int dust_row = 0;
  double dust_upper = 0.0;
  // The terms' weights at the star's A_V, once a star (not again for every entry of every
  // footprint spaxel).
  double dust_weight[kMaxDustRank];
  if (dust.phi) {
    dust.locate(stars.dust_av ? stars.dust_av[i] : 0.0, dust_row, dust_upper);
    for (int r = 0; r < dust.rank; ++r) dust_weight[r] = dust.weight(dust_row, dust_upper, r);
  }
  const double mass = stars.initial_mass_msun[i];
  const std::size_t n_a = static_cast<std::size_t>(dust.rank);
  // An entry times each term's weight at the star's A_V (columns c .. c + rank - 1) with dust.
  auto deposit = [&](std::size_t index, double m) {
    if (!dust.phi) {
      f(index, m);
      return;
    }
    for (int r = 0; r < dust.rank; ++r) f(index + r, m * dust_weight[r]);
  };
  const double doppler = tile.one_plus_z * (1.0 + v / kSpeedOfLightKms);
  EdgeStep step[2];
  double edge_amount[2] = {0.0, 0.0};  // per unit mass of footprint weight, / flux_scale
  for (int e = 0; e < 2; ++e) {
    const EdgeWindow& window = tile.edges[e];
    if (window.n_bins == 0) continue;
    step[e] = edge_step(bins, window, window.rest_angstrom * doppler);
    double flux = 0.0;
    for (int n = 0; n < 4; ++n) flux += w.weight[n] * end_flux_density(ssp, w.node[n], window.red);
    edge_amount[e] = flux / (doppler * window.flux_scale);
  }
  std::int32_t span_first = 0, span_last = -1;  // the spaxels the footprint may reach
  if constexpr (!std::is_same_v<P, NoPrefetch>)
    stars.footprint.spaxel_span(i, span_first, span_last);
  stars.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
    const std::int32_t row = spaxel - tile.first_spaxel;
    if (row < 0 || row >= tile.n_spaxels) return;
    const std::size_t base = tile.row_base(row);
    if constexpr (!std::is_same_v<P, NoPrefetch>) {
      if (spaxel < span_last && row + 1 < tile.n_spaxels) {
        const std::size_t next = tile.row_base(row + 1);
        for (int n = 0; n < 4; ++n)
          prefetch(next + tile.row_spectrum_place(row + 1, w.node[n], jv));
      }
    }
    for (int n = 0; n < 4; ++n) {
      const double m = mass * weight * w.weight[n];
      const std::size_t column = tile.row_spectrum_place(row, w.node[n], jv);
      deposit(base + column, m * (1.0 - tv));
      deposit(base + column + n_a, m * tv);
    }
    for (int e = 0; e < 2; ++e) {
      if (step[e].bin < 0) continue;
      const std::size_t s = base + tile.row_edge_place(row, e) +
                            static_cast<std::size_t>(step[e].bin - tile.edges[e].first_bin) * n_a;
      const double amount = mass * weight * edge_amount[e];
      deposit(s, amount);
      deposit(s + static_cast<std::size_t>(tile.edges[e].n_bins) * n_a, amount * step[e].fraction);
    }
  });
}

// Reverse mode (docs/gradients.md): the entries of for_each_histogram_entry, in the same order
// and from the same weights, per unit initial mass, with their derivatives along the star's
// fields: f(index, a, {d a / d age_gyr, d a / d metallicity, d a / d v_los_kms, d a / d A_V,
// d a / d x_kpc, d a / d y_kpc}), the entry being m a; the sky position's slopes are the
// footprint weight's (FootprintView::for_each_slopes: kernel smoothing's, else 0). Mirrors
// for_each_histogram_entry term by term (the finite-difference tests, tests/test_stellar_vjp.cpp,
// hold the two together). Every entry the star makes is visited, even where a is 0 (a weight at its
// node, a massless star): its derivatives need not be.
struct EntrySlopes {
  double age_gyr, metallicity, velocity_kms, dust_av, x_kpc, y_kpc;
};

template <class F>
IFUSIM_HD void for_each_histogram_entry_slopes(const SspView& ssp, const WaveBins& bins,
                                               const StarViews& stars, const HistogramTile& tile,
                                               std::size_t i, F&& f) {
  const double age = stars.age_gyr[i], metallicity = stars.metallicity[i];
  const NodeWeights w = node_weights(ssp, age, metallicity);
  if (w.skip) return;  // outside the grid under "zero": no light, no gradient
  const NodeWeightSlopes ws = node_weight_slopes(ssp, age, metallicity);
  const double v = stars.velocity_los_kms[i];
  int jv = 0;
  double tv = 0.0;
  tile.velocity.locate(v, jv, tv);
  const double dtv = tile.velocity.upper_weight_slope(v);
  const DustExpansionView& dust = tile.dust;
  int dust_row = 0;
  double dust_upper = 0.0;
  const double a_v = stars.dust_av ? stars.dust_av[i] : 0.0;
  if (dust.phi) dust.locate(a_v, dust_row, dust_upper);
  const std::size_t n_a = static_cast<std::size_t>(dust.rank);
  // An entry (and its slopes) times each dust term's weight, and the term's slope in A_V.
  auto deposit = [&](std::size_t index, double a, EntrySlopes d) {
    if (!dust.phi) {
      f(index, a, d);
      return;
    }
    for (int r = 0; r < dust.rank; ++r) {
      const double q = dust.weight(dust_row, dust_upper, r);
      f(index + r, a * q,
        EntrySlopes{d.age_gyr * q, d.metallicity * q, d.velocity_kms * q,
                    a * dust.weight_slope(a_v, dust_row, r), d.x_kpc * q, d.y_kpc * q});
    }
  };
  const double doppler = tile.one_plus_z * (1.0 + v / kSpeedOfLightKms);
  // d doppler / d v over doppler: 1 / (c + v).
  const double doppler_slope = 1.0 / (kSpeedOfLightKms + v);
  EdgeStep step[2];
  double fraction_slope[2] = {0.0, 0.0};  // d fraction / d v
  double edge_amount[2] = {0.0, 0.0};
  EntrySlopes edge_slope[2] = {{0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}};
  for (int e = 0; e < 2; ++e) {
    const EdgeWindow& window = tile.edges[e];
    if (window.n_bins == 0) continue;
    const double x = window.rest_angstrom * doppler;
    step[e] = edge_step(bins, window, x);
    fraction_slope[e] = edge_step_fraction_slope(bins, window, x) * x * doppler_slope;
    double flux = 0.0, flux_age = 0.0, flux_z = 0.0;
    for (int n = 0; n < 4; ++n) {
      const double f_end = end_flux_density(ssp, w.node[n], window.red);
      flux += w.weight[n] * f_end;
      flux_age += ws.per_age_gyr[n] * f_end;
      flux_z += ws.per_metallicity[n] * f_end;
    }
    const double scale = 1.0 / (doppler * window.flux_scale);
    edge_amount[e] = flux * scale;
    edge_slope[e] = {
        flux_age * scale, flux_z * scale, -edge_amount[e] * doppler_slope, 0.0, 0.0, 0.0};
  }
  // The footprint's spaxels, weights (as for_each gives them) and the weights' slopes along x, y.
  stars.footprint.for_each_slopes(i, [&](std::int32_t spaxel, double weight, double w_x,
                                         double w_y) {
    const std::int32_t row = spaxel - tile.first_spaxel;
    if (row < 0 || row >= tile.n_spaxels) return;
    const std::size_t base = tile.row_base(row);
    for (int n = 0; n < 4; ++n) {
      const double a = weight * w.weight[n];
      const double a_age = weight * ws.per_age_gyr[n], a_z = weight * ws.per_metallicity[n];
      const double a_x = w_x * w.weight[n], a_y = w_y * w.weight[n];
      const std::size_t column = tile.row_spectrum_place(row, w.node[n], jv);
      deposit(base + column, a * (1.0 - tv),
              EntrySlopes{a_age * (1.0 - tv), a_z * (1.0 - tv), -a * dtv, 0.0, a_x * (1.0 - tv),
                          a_y * (1.0 - tv)});
      deposit(base + column + n_a, a * tv,
              EntrySlopes{a_age * tv, a_z * tv, a * dtv, 0.0, a_x * tv, a_y * tv});
    }
    for (int e = 0; e < 2; ++e) {
      if (step[e].bin < 0) continue;
      const std::size_t s = base + tile.row_edge_place(row, e) +
                            static_cast<std::size_t>(step[e].bin - tile.edges[e].first_bin) * n_a;
      const EntrySlopes& d = edge_slope[e];
      const double fraction = step[e].fraction;
      deposit(s, weight * edge_amount[e],
              EntrySlopes{weight * d.age_gyr, weight * d.metallicity, weight * d.velocity_kms, 0.0,
                          w_x * edge_amount[e], w_y * edge_amount[e]});
      deposit(s + static_cast<std::size_t>(tile.edges[e].n_bins) * n_a,
              weight * edge_amount[e] * fraction,
              EntrySlopes{weight * d.age_gyr * fraction, weight * d.metallicity * fraction,
                          weight * (d.velocity_kms * fraction + edge_amount[e] * fraction_slope[e]),
                          0.0, w_x * edge_amount[e] * fraction, w_y * edge_amount[e] * fraction});
    }
  });
}

// The tile narrowed to the rows (spaxels) `rows`, so that a star's entries in its other rows are
// left out; `sums`, the whole tile's array, moved to where the narrowed tile's entries start.
IFUSIM_HD inline HistogramTile tile_rows(const HistogramTile& tile, const ScatterRows& rows,
                                         std::int64_t*& sums) {
  HistogramTile band = tile;
  const std::int32_t skipped = rows.first - tile.first_spaxel;
  band.first_spaxel = rows.first;
  band.n_spaxels = rows.end - rows.first;
  if (tile.row_start) {  // the windows' starts are places in the whole tile
    band.row_start += skipped;
    band.row_window += 2 * skipped;
  } else {
    sums += static_cast<std::size_t>(skipped) * tile.columns();
  }
  return band;
}

// A star's rows (spaxels) for scatter_by_rows, and its lower velocity node as the key: the stars
// of one first row and velocity node add into the same few cache lines of each of their rows (a
// row's window is laid out (SSP node, velocity node, dust term)), where in the stars' own order
// each add missed the cache (half the smoothed deposit's time before; docs/benchmarks.md).
struct StarSpaxelSpan {
  FootprintView footprint;
  const float* velocity_los_kms;
  VelocityBins velocity;
  std::size_t n_keys;  // the velocity nodes
  StarSpaxelSpan(const StarViews& stars, const HistogramTile& tile)
      : footprint(stars.footprint),
        velocity_los_kms(stars.velocity_los_kms),
        velocity(tile.velocity),
        n_keys(static_cast<std::size_t>(tile.velocity.n)) {}
  IFUSIM_HD void operator()(std::size_t i, std::int32_t& first, std::int32_t& last) const {
    footprint.spaxel_span(i, first, last);
  }
  IFUSIM_HD std::uint32_t key(std::size_t i) const {
    int jv = 0;
    double tv = 0.0;
    velocity.locate(velocity_los_kms[i], jv, tv);
    return static_cast<std::uint32_t>(jv);
  }
};

// Marks (adds 1 to) every entry of the tile some star makes, even with a weight of 0: the
// entries whose dL/dH the gather needs (psum'd like the dense histogram).
struct MarkHistogramEntries {
  SspView ssp;
  WaveBins bins;
  StarViews stars;
  HistogramTile tile;
  std::int64_t* marks;
  IFUSIM_HD void operator()(std::size_t i, const ScatterRows& rows) const {
    std::int64_t* sums = marks;
    const HistogramTile band = tile_rows(tile, rows, sums);
    // The deposit's own enumeration (the same entries as the slopes', without the slopes).
    for_each_histogram_entry(ssp, bins, stars, band, i, [&](std::size_t index, double) {
      rows.add(sums + index, std::int64_t{1});
    });
  }
};

void mark_histogram_entries(const Device& device, const SspView& ssp, const WaveBins& bins,
                            const StarViews& stars, const HistogramTile& tile,
                            Span<std::int64_t> marks, bool marks_shared) {
  scatter_by_rows(device, stars.n, tile.first_spaxel, tile.n_spaxels, marks_shared,
                  StarSpaxelSpan(stars, tile),
                  MarkHistogramEntries{ssp, bins, stars, tile, marks.data});
}

// The binned product's voxels (binned_product_on_device, binned_product.h): one work item a
// (row, bin) of a span of B's bins, the bins of a row consecutive, so that a GPU warp's threads
// read consecutive floats of each of B's rows and the same entries of H. Each voxel is the host's
// sum (binned_product.cpp), operation for operation, every product and sum rounded on its own
// (mul_rn, add_rn: never fused into an FMA):
// - a dense block's row: the float sum over the block's columns in ascending order of
//   float(h) * B (multiply_rows). The host's dense tile of H holds 0 where the row has no entry;
//   those terms are skipped here. Skipping them gives the same bits: for a finite B, 0 * B is
//   +-0; the sum starts at +0 and never becomes -0 (a sum of two values is -0 in round-to-nearest
//   only when both are -0, and x + (-x) is +0), and s + (+-0) is s for any s that is not -0. The
//   row's entries are in ascending order of column, the block's columns' order. A dust segment's
//   reduced rows (term_panels > 0, their entries term by term): one such float sum for each
//   term's entries, the terms' sums added in double from +0 in order (the host's product a term
//   at a time).
// - a sparse block's row (add_scaled_rows): the row's entries in groups of kScaledRowsGroup from
//   its first, each group's float sum of float(h) * B from +0 in order, the groups' sums added
//   in double from +0 in order.
// Either sum is then added to the voxel in double and rounded to float once, as the host adds a
// block's product into cube rows that hold zeros. A row without entries is left as it is (the
// host's sum over nothing is +0, which leaves +0 the same).
struct MultiplyBasisSpan {
  BasisProductRows rows;
  const float* basis;  // n_populated x width, row-major
  std::size_t width;
  float* cube_rows;  // the span's first bin of row 0; row r at r * cube_stride
  std::size_t cube_stride;
  IFUSIM_HD void operator()(std::size_t item) const {
    const std::size_t r = item / width, k = item % width;
    const std::size_t e0 = rows.offsets[r], e1 = rows.offsets[r + 1];
    if (e0 == e1) return;
    float* out = cube_rows + r * cube_stride + k;
    if (rows.dense[r / rows.rows_per_block] && rows.term_panels > 0) {
      double total = 0.0;
      float sum = 0.0f;
      std::size_t panel = static_cast<std::size_t>(rows.column[e0]) % rows.term_panels;
      for (std::size_t e = e0; e < e1; ++e) {
        const std::size_t term = static_cast<std::size_t>(rows.column[e]) % rows.term_panels;
        if (term != panel) {
          total = add_rn(total, static_cast<double>(sum));
          sum = 0.0f;
          panel = term;
        }
        sum = add_rn(sum, mul_rn(static_cast<float>(rows.value[e]),
                                 basis[static_cast<std::size_t>(rows.column[e]) * width + k]));
      }
      total = add_rn(total, static_cast<double>(sum));
      *out = static_cast<float>(add_rn(static_cast<double>(*out), total));
    } else if (rows.dense[r / rows.rows_per_block]) {
      float sum = 0.0f;
      for (std::size_t e = e0; e < e1; ++e)
        sum = add_rn(sum, mul_rn(static_cast<float>(rows.value[e]),
                                 basis[static_cast<std::size_t>(rows.column[e]) * width + k]));
      *out = static_cast<float>(add_rn(static_cast<double>(*out), static_cast<double>(sum)));
    } else {
      double total = 0.0;
      for (std::size_t g = e0; g < e1; g += kScaledRowsGroup) {
        const std::size_t g1 = g + kScaledRowsGroup < e1 ? g + kScaledRowsGroup : e1;
        float sum = 0.0f;
        for (std::size_t e = g; e < g1; ++e)
          sum = add_rn(sum, mul_rn(static_cast<float>(rows.value[e]),
                                   basis[static_cast<std::size_t>(rows.column[e]) * width + k]));
        total = add_rn(total, static_cast<double>(sum));
      }
      *out = static_cast<float>(add_rn(static_cast<double>(*out), total));
    }
  }
};

void multiply_basis_span(const Device& device, const BasisProductRows& rows, const float* basis,
                         std::size_t width, float* cube_rows, std::size_t cube_stride) {
  parallel_for(device, rows.n_rows * width,
               MultiplyBasisSpan{rows, basis, width, cube_rows, cube_stride});
}

// The binned product's transpose (binned_product_transpose_on_device, binned_product.h): each
// entry's dot product of its cotangent row with its row of B over a chunk of bins, summed as
// multiply_by_transpose (stages/common/vector_kernels.cpp) sums one element, for both kinds of
// block: lane l takes q = l, l + 8, ... below the chunk's whole eights, from +0, each product and
// sum rounded on its own (mul_rn, add_rn: never fused into an FMA); the lanes are added in the
// tree ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the last width mod 8 products in
// order, and the dot is added to the entry's dL/dH so far (the host's dl_dh[place] += dot, a
// chunk at a time in the chunks' order). Two passes: one work item an (entry, lane), the eight
// lanes of an entry consecutive, so that a GPU warp reads 64 consecutive bytes of each of four
// rows of B (and of one cotangent row, the entries of a row being consecutive) at each step; then
// one an entry for the tree.
struct TransposeDotLanes {
  TransposeDots dots;
  std::size_t first_entry;
  IFUSIM_HD void operator()(std::size_t item) const {
    const std::size_t e = first_entry + item / 8, lane = item % 8;
    const std::size_t whole = dots.width / 8 * 8;
    const double *g = dots.g_of(e), *b = dots.b_of(e);
    double sum = 0.0;
    for (std::size_t q = lane; q < whole; q += 8) sum = add_rn(sum, mul_rn(g[q], b[q]));
    dots.lanes[item] = sum;
  }
};
struct FinishTransposeDots {
  TransposeDots dots;
  std::size_t first_entry;
  IFUSIM_HD void operator()(std::size_t i) const {
    const std::size_t e = first_entry + i;
    const double* s = dots.lanes + 8 * i;
    double dot = add_rn(add_rn(add_rn(s[0], s[1]), add_rn(s[2], s[3])),
                        add_rn(add_rn(s[4], s[5]), add_rn(s[6], s[7])));
    const double *g = dots.g_of(e), *b = dots.b_of(e);
    for (std::size_t q = dots.width / 8 * 8; q < dots.width; ++q)
      dot = add_rn(dot, mul_rn(g[q], b[q]));
    dots.sums[e] = add_rn(dots.sums[e], dot);
  }
};

void add_transpose_dots(const Device& device, const TransposeDots& dots, std::size_t first_entry,
                        std::size_t n_entries) {
  parallel_for(device, 8 * n_entries, TransposeDotLanes{dots, first_entry});
  parallel_for(device, n_entries, FinishTransposeDots{dots, first_entry});
}

// The gather: each star's sums over its entries of (entry's slope) x dL/dH, in double, in the
// entries' fixed order, added to what earlier tiles gave it (one thread a star: no atomics, the
// same bits for any device count).
struct GatherStarGradients {
  SspView ssp;
  WaveBins bins;
  StarViews stars;
  HistogramTile tile;
  const double* dl_dh;  // the tile's n_spaxels x columns
  StarGradientViews out;
  IFUSIM_HD void operator()(std::size_t i) const {
    double g_mass = 0.0, g_age = 0.0, g_z = 0.0, g_v = 0.0, g_av = 0.0, g_x = 0.0, g_y = 0.0;
    for_each_histogram_entry_slopes(ssp, bins, stars, tile, i,
                                    [&](std::size_t index, double a, const EntrySlopes& d) {
                                      const double g = dl_dh[index];
                                      g_mass += a * g;
                                      g_age += d.age_gyr * g;
                                      g_z += d.metallicity * g;
                                      g_v += d.velocity_kms * g;
                                      g_av += d.dust_av * g;
                                      g_x += d.x_kpc * g;
                                      g_y += d.y_kpc * g;
                                    });
    const double m = stars.initial_mass_msun[i];
    out.initial_mass_msun[i] += g_mass;
    out.age_gyr[i] += m * g_age;
    out.metallicity[i] += m * g_z;
    out.velocity_los_kms[i * out.velocity_stride] += m * g_v;
    if (out.dust_av) out.dust_av[i] += m * g_av;
    if (out.position_x_kpc) {
      out.position_x_kpc[i * out.position_stride] += m * g_x;
      out.position_y_kpc[i * out.position_stride] += m * g_y;
    }
  }
};

void gather_star_gradients(const Device& device, const ifusim::SspView& ssp,
                           const ifusim::WaveBins& bins, const ifusim::StarViews& stars,
                           const ifusim::HistogramTile& tile, const double* dl_dh,
                           const ifusim::StarGradientViews& out) {
  parallel_for(device, stars.n, GatherStarGradients{ssp, bins, stars, tile, dl_dh, out});
}

// The velocity nodes each row of the tile holds entries at (before its window is known): one
// count per star, row and node it deposits at (a star's lower node and the one above), over the
// spaxels of its footprint, as for_each_histogram_entry visits them.
struct CountVelocityNodes {
  SspView ssp;
  StarViews stars;
  HistogramTile tile;
  std::int64_t* counts;  // n_spaxels x velocity.n
  IFUSIM_HD void operator()(std::size_t i, const ScatterRows& rows) const {
    if (node_weights(ssp, stars.age_gyr[i], stars.metallicity[i]).skip) return;
    int jv = 0;
    double tv = 0.0;
    tile.velocity.locate(stars.velocity_los_kms[i], jv, tv);
    stars.footprint.for_each(i, [&](std::int32_t spaxel, double) {
      if (spaxel < rows.first || spaxel >= rows.end) return;
      std::int64_t* at =
          counts + static_cast<std::size_t>(spaxel - tile.first_spaxel) * tile.velocity.n + jv;
      rows.add(at, std::int64_t{1});
      rows.add(at + 1, std::int64_t{1});
    });
  }
};

void count_velocity_nodes(const Device& device, const SspView& ssp, const StarViews& stars,
                          const HistogramTile& tile, Span<std::int64_t> counts,
                          bool counts_shared) {
  scatter_by_rows(device, stars.n, tile.first_spaxel, tile.n_spaxels, counts_shared,
                  StarSpaxelSpan(stars, tile), CountVelocityNodes{ssp, stars, tile, counts.data});
}

// Dense: integer sums into the tile's histogram (its rows in windows where it has them), star i's
// entries in the rows (spaxels) `rows`, each added as `rows` says: plainly by the host thread that
// owns those rows, atomically on a GPU or where devices share the array (scatter_by_rows).
struct DepositHistogram {
  SspView ssp;
  WaveBins bins;
  StarViews stars;
  HistogramTile tile;
  double counts_per_unit;
  std::int64_t* histogram;
  IFUSIM_HD void operator()(std::size_t i, const ScatterRows& rows) const {
    std::int64_t* sums = histogram;
    const HistogramTile band = tile_rows(tile, rows, sums);
    for_each_histogram_entry(
        ssp, bins, stars, band, i,
        [&](std::size_t index, double m) {
          if (m != 0.0) rows.add(sums + index, to_fixed(m, counts_per_unit));
        },
        [&](std::size_t index) {
#if !defined(__CUDA_ARCH__)
          __builtin_prefetch(sums + index, 1);
#endif
        });
  }
};

void accumulate_histogram(const Device& device, const SspView& ssp, const WaveBins& bins,
                          const StarViews& stars, const HistogramTile& tile, double counts_per_unit,
                          Span<std::int64_t> histogram, bool histogram_shared) {
  scatter_by_rows(device, stars.n, tile.first_spaxel, tile.n_spaxels, histogram_shared,
                  StarSpaxelSpan(stars, tile),
                  DepositHistogram{ssp, bins, stars, tile, counts_per_unit, histogram.data});
}

// Sparse: each star's entries counted, then written at their offsets as (index, fixed) pairs.
struct CountHistogramEntries {
  SspView ssp;
  WaveBins bins;
  StarViews stars;
  HistogramTile tile;
  std::uint64_t* counts;
  IFUSIM_HD void operator()(std::size_t i) const {
    std::uint64_t n = 0;
    for_each_histogram_entry(ssp, bins, stars, tile, i, [&](std::size_t, double) { ++n; });
    counts[i] = n;
  }
};

struct WriteHistogramEntries {
  SspView ssp;
  WaveBins bins;
  StarViews stars;
  HistogramTile tile;
  double counts_per_unit;
  const std::uint64_t* offsets;
  std::uint64_t n_stars, n_entries;
  std::uint64_t* keys;
  std::int64_t* values;
  // Set when a star makes another number of entries than CountHistogramEntries counted: the two
  // passes must agree (the same loop, the same arithmetic), and if a compiler made them differ
  // the entries are kept inside the star's own slots and the run stops with an error rather
  // than sum garbage keys.
  unsigned* count_mismatch;
  IFUSIM_HD void operator()(std::size_t i) const {
    std::uint64_t at = offsets[i];
    const std::uint64_t end = i + 1 < n_stars ? offsets[i + 1] : n_entries;
    for_each_histogram_entry(ssp, bins, stars, tile, i, [&](std::size_t index, double m) {
      if (at < end) {
        keys[at] = index;
        values[at] = to_fixed(m, counts_per_unit);
      }
      ++at;
    });
    if (at != end) *count_mismatch = 1u;
  }
};

SparseHistogramShard sparse_histogram(const Device& device, const SspView& ssp,
                                      const WaveBins& bins, const StarViews& stars,
                                      const HistogramTile& tile, double counts_per_unit) {
  if (stars.n == 0) return {};
  DeviceBuffer<std::uint64_t> offsets(device, stars.n);
  parallel_for(device, stars.n, CountHistogramEntries{ssp, bins, stars, tile, offsets.data()});
  const std::size_t n = exclusive_scan(device, offsets.data(), stars.n);
  DeviceBuffer<std::uint64_t> keys(device, n);
  DeviceBuffer<std::int64_t> values(device, n);
  DeviceBuffer<unsigned> count_mismatch(device, 1);
  count_mismatch.zero();
  parallel_for(
      device, stars.n,
      WriteHistogramEntries{ssp, bins, stars, tile, counts_per_unit, offsets.data(), stars.n, n,
                            keys.data(), values.data(), count_mismatch.data()});
  offsets.reset();
  unsigned mismatch = 0;
  count_mismatch.download(&mismatch, 1);
  if (mismatch)
    throw std::logic_error(
        "stellar_spectra: the sparse histogram's count and write passes disagree on a star's "
        "entries (a backend or compiler fault; the dense histogram, "
        "stages.stellar_spectra.histogram = \"dense\", avoids this path)");
  return sort_reduce_by_key(device, std::move(keys), std::move(values), n);
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
