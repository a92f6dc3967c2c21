// Dust kernels: one source, compiled by dust_cpu.cpp and dust_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// A star's A_V over its footprint, plus its birth cloud's if it is young (a star outside the
// field gets 0: its light reaches no spaxel): the screen of the one spaxel it reaches (always so
// without smoothing: then exactly the unsmoothed A_V), or with several spaxels the A_V whose
// transmission is their weighted mean transmission, 10^(-0.4 A) = sum w 10^(-0.4 A_s) / sum w,
// summed relative to the smallest A_s so far so that large A_V cannot underflow to 0.
struct StarDustAv {
  DustScreenView screens;
  FootprintView footprint;
  BirthCloudView birth_clouds;
  const float* z_kpc;
  float* dust_av;
  IFUSIM_HD void operator()(std::size_t i) const {
    const float z = z_kpc[i];
    const DustScreenView& tables = screens;
    int count = 0;
    float av_min = 0.0f;       // the smallest A_s so far
    double weight = 0.0;       // sum of w
    double transmitted = 0.0;  // sum of w 10^(-0.4 (A_s - av_min))
    footprint.for_each(i, [&](std::int32_t spaxel, double w) {
      const float av = screen_av(tables, spaxel, z);
      if (count == 0) {
        av_min = av;
        transmitted = w;
      } else if (av < av_min) {
        transmitted = transmitted * pow(10.0, -0.4 * (static_cast<double>(av_min) - av)) + w;
        av_min = av;
      } else {
        transmitted += w * pow(10.0, -0.4 * (static_cast<double>(av) - av_min));
      }
      weight += w;
      ++count;
    });
    if (count == 0)
      dust_av[i] = 0.0f;  // no light in the field
    else if (count == 1)
      dust_av[i] = av_min;
    else
      dust_av[i] = static_cast<float>(av_min - 2.5 * log10(transmitted / weight));
    // A young star's birth cloud (in float, the same on every device: one addition a star).
    if (count > 0 && birth_clouds.age_gyr != nullptr &&
        birth_clouds.age_gyr[i] < birth_clouds.young_below_gyr)
      dust_av[i] += birth_clouds.av_mag;
  }
};

void compute_dust_av(const Device& device, const DustScreenView& screens,
                     const FootprintView& footprint, const BirthCloudView& birth_clouds,
                     Span<const float> z_kpc, Span<float> dust_av) {
  parallel_for(device, dust_av.size,
               StarDustAv{screens, footprint, birth_clouds, z_kpc.data, dust_av.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
