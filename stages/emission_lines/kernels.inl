// Emission-line kernels: one source, compiled by emission_lines_cpu.cpp and _cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// 12 + log(O/H) of cell i: from the O and H mass fractions, else from Z scaled to solar; -1
// (below every table) where there are no metals.
IFUSIM_HD inline double cell_oxygen_abundance(const GasLineViews& gas, std::size_t i) {
  if (gas.hydrogen_fraction != nullptr) {
    const double x_h = gas.hydrogen_fraction[i], x_o = gas.oxygen_fraction[i];
    return x_h > 0.0 && x_o > 0.0 ? 12.0 + log10((x_o / 15.999) / (x_h / 1.008)) : -1.0;
  }
  const double z = gas.metallicity[i];
  return z > 0.0 ? kSolarOxygenAbundance + log10(z / kSolarMetallicity) : -1.0;
}

// One gas cell: all its lines, into every spaxel its footprint reaches.
struct DepositCellLines {
  LineDeposit p;
  GasLineViews gas;
  std::int64_t* line_sums;
  std::int64_t* moment_sums;

  IFUSIM_HD void operator()(std::size_t i) const {
    const double sfr = gas.sfr_msun_per_yr[i];
    if (!(sfr > 0.0)) return;
    // The ratio grid's interpolation point, clamped to its ends.
    double t = (cell_oxygen_abundance(gas, i) - p.oxygen_min) / p.oxygen_step;
    t = t < 0.0 ? 0.0 : (t > p.n_oxygen - 1 ? p.n_oxygen - 1 : t);
    int j = static_cast<int>(floor(t));
    j = j > p.n_oxygen - 2 ? p.n_oxygen - 2 : j;
    const double f = t - j;
    const double v = gas.velocity_los_kms[i];
    const double doppler = p.one_plus_z * (1.0 + v / kSpeedOfLightKms);
    // The screen in front of the cell and the birth clouds of its H II regions.
    const double a_v =
        gas.dust_av != nullptr ? static_cast<double>(gas.dust_av[i]) + p.birth_cloud_av_mag : 0.0;
    const double halpha_lsun = sfr * p.halpha_lsun_per_sfr;
    for (int l = 0; l < p.n_lines; ++l) {
      const LineWindow& line = p.lines[l];
      if (line.n_bins == 0) continue;
      const double* row = p.ratio_to_halpha + static_cast<std::size_t>(line.ratio_row) * p.n_oxygen;
      double luminosity = halpha_lsun * (row[j] * (1.0 - f) + row[j + 1] * f);
      if (a_v > 0.0) luminosity *= pow(10.0, -0.4 * a_v * line.attenuation_ratio);
      if (!(luminosity > 0.0)) continue;
      const double vacuum = line.vacuum_angstrom * doppler;
      const double centre = p.to_air ? air_from_vacuum(vacuum) : vacuum;
      const double sigma = centre * line.profile_sigma_kms / kSpeedOfLightKms;
      const double reach = kLineTruncationSigmas * sigma;
      // Bins within +-8 sigma, cut to the line's window; the Gaussian's tails go to the end bins
      // unless the window (the simulated band) cut them off.
      const double lo = floor(p.grid.edge_position(centre - reach));
      const double hi = floor(p.grid.edge_position(centre + reach));
      const int last_bin = line.first_bin + line.n_bins - 1;
      const int k0 = lo < line.first_bin ? line.first_bin : static_cast<int>(lo);
      const int k1 = hi > last_bin ? last_bin : static_cast<int>(hi);
      if (k0 > k1) continue;
      const bool tail_below = lo >= line.first_bin, tail_above = hi <= last_bin;
      const double per_angstrom = 0.70710678118654752 / sigma;
      const double scale = luminosity / p.grid.width(0) * p.counts_per_unit;
      double lower_edge = p.edge(k0);
      double below = tail_below ? -0.5 : 0.5 * erf((lower_edge - centre) * per_angstrom);
      // The profile's bins in chunks: each bin's share of the line (the Gaussian's integral over
      // it, an erf at each edge) and its width (a pow at each edge of a logarithmic grid) once,
      // then into every spaxel of the footprint (with kernel smoothing, tens of them, which
      // made them all again). The same values, so the same fixed-point sums.
      for (int c0 = k0; c0 <= k1; c0 += kLineChunkBins) {
        const int c1 = c0 + kLineChunkBins - 1 < k1 ? c0 + kLineChunkBins - 1 : k1;
        double density[kLineChunkBins];  // L_sun / A of the bin's share, in fixed-point counts
        for (int k = c0; k <= c1; ++k) {
          const double upper_edge = p.edge(k + 1);
          const double above =
              k == k1 && tail_above ? 0.5 : 0.5 * erf((upper_edge - centre) * per_angstrom);
          const double share = above - below;
          below = above;
          // Luminosity density (L_sun / A) of the bin's share of the line over its width (one
          // width for linear bins, each its own for logarithmic ones).
          density[k - c0] =
              share > 0.0
                  ? (p.grid.is_log() ? luminosity / (upper_edge - lower_edge) * p.counts_per_unit
                                     : scale) *
                        share
                  : 0.0;
          lower_edge = upper_edge;
        }
        gas.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
          std::int64_t* window =
              line_sums + static_cast<std::size_t>(spaxel) * p.row_columns + line.offset;
          for (int k = c0; k <= c1; ++k)
            if (density[k - c0] > 0.0)
              atomic_add_fixed(window + (k - line.first_bin),
                               to_fixed(density[k - c0] * weight, 1.0));
        });
      }
      if (l != p.halpha_line) continue;
      // (w, w v, w (v^2 + sigma_line^2)): the dispersion a Gaussian fit to the spaxel's H-alpha
      // would measure, before the LSF.
      gas.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
        std::int64_t* m = moment_sums + static_cast<std::size_t>(spaxel) * 3;
        const double w = luminosity * weight;
        atomic_add_fixed(m, to_fixed(w, p.moment_counts_per_unit));
        atomic_add_fixed(m + 1, to_fixed(w * v, p.moment_counts_per_unit));
        atomic_add_fixed(m + 2, to_fixed(w * (v * v + line.sigma_kms * line.sigma_kms),
                                         p.moment_counts_per_unit));
      });
    }
  }
};

// Reverse mode (docs/gradients.md, "Gas: the emission lines"): one cell's gradients, gathered
// from the cotangent of its lines' windows (`g_windows`: dL/d the reduced cube at every spaxel's
// window bins, laid out as the line sums) over the bins and spaxels DepositCellLines deposits
// into, in the same order. Every line's light in a bin is
//   sfr x (L_Halpha / SFR) x ratio(t) x dust x share_k(v) x weight / width_k,
// linear in the SFR; ratio(t) the grid's linear interpolation at t = (12 + log(O/H) - min) / step
// (its slope: the cell's (row[j+1] - row[j]), one-sided from the right at a node, 0 where t is
// clamped); share_k = Phi(u_{k+1}) - Phi(u_k) the Gaussian's integral over bin k, whose edges'
// u = (edge - centre) / (sqrt 2 sigma) move with the centre and with sigma = centre x
// profile_sigma / c (so du/dcentre = -edge / (sqrt 2 sigma centre)): its derivative in v_los is
// a difference of Gaussians. One thread a cell, each writing only its own gradients (added to
// what is there): no atomics, the same bits for any device count.
struct GatherCellLineGradients {
  LineDeposit p;
  GasLineViews gas;
  const double* g_windows;  // n_spaxels x p.row_columns
  CellLineGradientViews out;

  IFUSIM_HD void operator()(std::size_t i) const {
    const double sfr = gas.sfr_msun_per_yr[i];
    // The forward deposits nothing for sfr <= 0; at sfr = 0 the derivative given is the one from
    // the right (the light a cell would shine with a little star formation), below it 0.
    if (!(sfr >= 0.0)) return;
    const double oxygen = cell_oxygen_abundance(gas, i);
    const double t_raw = (oxygen - p.oxygen_min) / p.oxygen_step;
    double t = t_raw < 0.0 ? 0.0 : (t_raw > p.n_oxygen - 1 ? p.n_oxygen - 1 : t_raw);
    int j = static_cast<int>(floor(t));
    j = j > p.n_oxygen - 2 ? p.n_oxygen - 2 : j;
    const double f = t - j;
    // Clamped (below the grid, at or above its last node, no metals): a zero derivative.
    const bool t_free = oxygen > 0.0 && t_raw >= 0.0 && t_raw < p.n_oxygen - 1;
    const double v = gas.velocity_los_kms[i];
    const double doppler = p.one_plus_z * (1.0 + v / kSpeedOfLightKms);
    const double a_v =
        gas.dust_av != nullptr ? static_cast<double>(gas.dust_av[i]) + p.birth_cloud_av_mag : 0.0;
    double g_sfr = 0.0, g_t = 0.0, g_v = 0.0, g_av = 0.0;
    // The O/H and velocity derivatives are x sfr: a cell that forms no stars needs only its
    // light per unit SFR (the forward's work, without the deposit), not the profile's slopes.
    const bool slopes = sfr > 0.0;
    for (int l = 0; l < p.n_lines; ++l) {
      const LineWindow& line = p.lines[l];
      if (line.n_bins == 0) continue;
      const double* row = p.ratio_to_halpha + static_cast<std::size_t>(line.ratio_row) * p.n_oxygen;
      const double ratio = row[j] * (1.0 - f) + row[j + 1] * f;
      const double ratio_slope = t_free ? row[j + 1] - row[j] : 0.0;  // per unit t
      double per_sfr = p.halpha_lsun_per_sfr;  // the line's light over sfr x ratio
      if (a_v > 0.0) per_sfr *= pow(10.0, -0.4 * a_v * line.attenuation_ratio);
      const double vacuum = line.vacuum_angstrom * doppler;
      const double centre = p.to_air ? air_from_vacuum(vacuum) : vacuum;
      // d centre / d v_los (km/s^-1 x A).
      const double centre_slope = line.vacuum_angstrom * p.one_plus_z / kSpeedOfLightKms *
                                  (p.to_air ? air_from_vacuum_slope(vacuum) : 1.0);
      const double sigma = centre * line.profile_sigma_kms / kSpeedOfLightKms;
      const double reach = kLineTruncationSigmas * sigma;
      const double lo = floor(p.grid.edge_position(centre - reach));
      const double hi = floor(p.grid.edge_position(centre + reach));
      const int last_bin = line.first_bin + line.n_bins - 1;
      const int k0 = lo < line.first_bin ? line.first_bin : static_cast<int>(lo);
      const int k1 = hi > last_bin ? last_bin : static_cast<int>(hi);
      if (k0 > k1) continue;
      const bool tail_below = lo >= line.first_bin, tail_above = hi <= last_bin;
      const double per_angstrom = 0.70710678118654752 / sigma;
      // Phi(edge) = erf(u) / 2 and its derivative in v_los: exp(-u^2) / sqrt(pi) x du/dv, with
      // du/dcentre = -edge x per_angstrom / centre (sigma grows with the centre).
      auto cdf_slope = [&](double edge) {
        const double u = (edge - centre) * per_angstrom;
        return 0.56418958354775629 * exp(-u * u) * (-edge * per_angstrom / centre) * centre_slope;
      };
      double lower_edge = p.edge(k0);
      double below = tail_below ? -0.5 : 0.5 * erf((lower_edge - centre) * per_angstrom);
      double below_slope = tail_below || !slopes ? 0.0 : cdf_slope(lower_edge);
      // sum over bins of share (and its slope) x sum over spaxels of weight x g / width: the
      // profile made once a chunk of bins (as the forward), the footprint's cotangents summed
      // bin by bin in its order.
      double light = 0.0, light_slope = 0.0;
      for (int c0 = k0; c0 <= k1; c0 += kLineChunkBins) {
        const int c1 = c0 + kLineChunkBins - 1 < k1 ? c0 + kLineChunkBins - 1 : k1;
        double share[kLineChunkBins], share_slope[kLineChunkBins], width[kLineChunkBins];
        double g_sum[kLineChunkBins];
        for (int k = c0; k <= c1; ++k) {
          const double upper_edge = p.edge(k + 1);
          const bool last_tail = k == k1 && tail_above;
          const double above = last_tail ? 0.5 : 0.5 * erf((upper_edge - centre) * per_angstrom);
          const double above_slope = last_tail || !slopes ? 0.0 : cdf_slope(upper_edge);
          share[k - c0] = above - below;
          share_slope[k - c0] = above_slope - below_slope;
          width[k - c0] = p.grid.is_log() ? upper_edge - lower_edge : 1.0;
          g_sum[k - c0] = 0.0;
          below = above;
          below_slope = above_slope;
          lower_edge = upper_edge;
        }
        gas.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
          const double* g =
              g_windows + static_cast<std::size_t>(spaxel) * p.row_columns + line.offset;
          for (int k = c0; k <= c1; ++k) g_sum[k - c0] += weight * g[k - line.first_bin];
        });
        for (int k = c0; k <= c1; ++k) {
          const double gk = g_sum[k - c0] / width[k - c0];
          if (share[k - c0] > 0.0) light += gk * share[k - c0];
          light_slope += gk * share_slope[k - c0];
        }
      }
      // A linear grid's one width, as the forward divides by it.
      if (!p.grid.is_log()) {
        light /= p.grid.width(0);
        light_slope /= p.grid.width(0);
      }
      g_sfr += per_sfr * ratio * light;
      g_t += sfr * per_sfr * ratio_slope * light;
      g_v += sfr * per_sfr * ratio * light_slope;
      // The line's light times 10^(-0.4 A_V A_l/A_V): its derivative in the cell's screen (the
      // one from the right at A_V = 0, where the forward applies no factor).
      g_av -= 0.92103403719761836 * line.attenuation_ratio * sfr * per_sfr * ratio * light;
    }
    out.sfr_msun_per_yr[i] += g_sfr;
    out.velocity_los_kms[i * out.velocity_stride] += g_v;
    if (out.dust_av != nullptr) out.dust_av[i] += g_av;
    // t = (12 + log10(O/H) - min) / step: through Z, or the O and H mass fractions.
    const double per_log = g_t / (p.oxygen_step * 2.302585092994046);  // dL / d ln(O/H)
    if (gas.hydrogen_fraction != nullptr) {
      if (t_free) {
        out.hydrogen_fraction[i * out.metals_stride] -= per_log / gas.hydrogen_fraction[i];
        out.oxygen_fraction[i * out.metals_stride] += per_log / gas.oxygen_fraction[i];
      }
    } else if (t_free) {
      out.metallicity[i] += per_log / gas.metallicity[i];
    }
  }
};

void accumulate_emission_lines(const Device& device, const LineDeposit& deposit,
                               const GasLineViews& gas, Span<std::int64_t> line_sums,
                               Span<std::int64_t> moment_sums) {
  parallel_for(device, gas.n, DepositCellLines{deposit, gas, line_sums.data, moment_sums.data});
}

void gather_emission_line_gradients(const Device& device, const LineDeposit& deposit,
                                    const GasLineViews& gas, const double* g_windows,
                                    const CellLineGradientViews& out) {
  parallel_for(device, gas.n, GatherCellLineGradients{deposit, gas, g_windows, out});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
