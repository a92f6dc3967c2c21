// Emission-line kernels: one source, compiled by emission_lines_cpu.cpp and _cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// One gas cell: all its lines, into every spaxel its footprint reaches.
struct DepositCellLines {
  LineDeposit p;
  GasLineViews gas;
  std::int64_t* line_sums;
  std::int64_t* moment_sums;

  // 12 + log(O/H): from the O and H mass fractions, else from Z scaled to solar; -1 (below every
  // table) where there are no metals.
  IFUSIM_HD double oxygen_abundance(std::size_t i) const {
    if (gas.hydrogen_fraction != nullptr) {
      const double x_h = gas.hydrogen_fraction[i], x_o = gas.oxygen_fraction[i];
      return x_h > 0.0 && x_o > 0.0 ? 12.0 + log10((x_o / 15.999) / (x_h / 1.008)) : -1.0;
    }
    const double z = gas.metallicity[i];
    return z > 0.0 ? kSolarOxygenAbundance + log10(z / kSolarMetallicity) : -1.0;
  }

  IFUSIM_HD void operator()(std::size_t i) const {
    const double sfr = gas.sfr_msun_per_yr[i];
    if (!(sfr > 0.0)) return;
    // The ratio grid's interpolation point, clamped to its ends.
    double t = (oxygen_abundance(i) - p.oxygen_min) / p.oxygen_step;
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
      auto cdf = [&](int edge_bin) {
        const double edge = p.grid.edge(edge_bin);
        return 0.5 * erf((edge - centre) * per_angstrom);
      };
      // Luminosity density (L_sun / A) of each bin: the bin's share of the line over its width
      // (one width for linear bins, each its own for logarithmic ones).
      const double scale = luminosity / p.grid.width(0) * p.counts_per_unit;
      double below = tail_below ? -0.5 : cdf(k0);
      const double moment_weight = l == p.halpha_line ? luminosity : 0.0;
      gas.footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
        std::int64_t* window =
            line_sums + static_cast<std::size_t>(spaxel) * p.row_columns + line.offset;
        double previous = below;
        for (int k = k0; k <= k1; ++k) {
          const double above = k == k1 && tail_above ? 0.5 : cdf(k + 1);
          const double share = above - previous;
          previous = above;
          if (share > 0.0)
            atomic_add_fixed(
                window + (k - line.first_bin),
                to_fixed(
                    (p.grid.is_log() ? luminosity / p.grid.width(k) * p.counts_per_unit : scale) *
                        share * weight,
                    1.0));
        }
        if (moment_weight > 0.0) {
          // (w, w v, w (v^2 + sigma_line^2)): the dispersion a Gaussian fit to the spaxel's
          // H-alpha would measure, before the LSF.
          std::int64_t* m = moment_sums + static_cast<std::size_t>(spaxel) * 3;
          const double w = moment_weight * weight;
          atomic_add_fixed(m, to_fixed(w, p.moment_counts_per_unit));
          atomic_add_fixed(m + 1, to_fixed(w * v, p.moment_counts_per_unit));
          atomic_add_fixed(m + 2, to_fixed(w * (v * v + line.sigma_kms * line.sigma_kms),
                                           p.moment_counts_per_unit));
        }
      });
    }
  }
};

void accumulate_emission_lines(const Device& device, const LineDeposit& deposit,
                               const GasLineViews& gas, Span<std::int64_t> line_sums,
                               Span<std::int64_t> moment_sums) {
  parallel_for(device, gas.n, DepositCellLines{deposit, gas, line_sums.data, moment_sums.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
