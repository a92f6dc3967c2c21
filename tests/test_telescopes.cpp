// The telescope presets against the instruments' published numbers (each preset's description
// cites its sources); the numbers here are recomputed from those sources, not read from the code.
#include <catch2/catch.hpp>

#include <cmath>

#include "io/telescope.h"

using namespace ifusim;

TEST_CASE("telescope presets: every preset loads with a band, a resolution and a PSF",
          "[telescopes]") {
  const std::vector<std::string> names = telescope_preset_names();
  REQUIRE(names.size() >= 15);
  for (const std::string& name : names) {
    INFO(name);
    const Telescope t = load_telescope_preset(name, "telescope");
    CHECK(t.name == name);
    CHECK(t.n_wave() > 100);
    CHECK(t.n_spaxels_side() > 0);
    const double mid = t.wave_start_angstrom + 0.5 * t.n_wave() * t.wave_step_angstrom;
    CHECK(t.lsf_fwhm_angstrom.at(mid) > t.wave_step_angstrom);  // sampled at least once a FWHM
    CHECK(t.psf_fwhm_arcsec.at(mid) > 0.0);
  }
}

TEST_CASE("telescope presets: MUSE's nominal and extended modes as its pipeline samples them",
          "[telescopes]") {
  // ESO's MUSE overview: 480-930 nm nominal, 465-930 nm extended; pipeline cubes step 1.25 A on
  // a grid through 4749.75 A (3681 planes to 9349.75 A in the nominal mode).
  const Telescope nominal = load_telescope_preset("MUSE-WFM-N", "telescope");
  const Telescope extended = load_telescope_preset("MUSE-WFM-E", "telescope");
  CHECK(nominal.n_wave() == 3681);
  CHECK(nominal.wave_start_angstrom == 4749.75);
  CHECK(nominal.wave_start_angstrom + (nominal.n_wave() - 1) * 1.25 == 9349.75);
  CHECK(extended.n_wave() == 3681 + 120);  // 150 A more in the blue
  CHECK(extended.wave_start_angstrom == 4749.75 - 150.0);
  for (const Telescope* t : {&nominal, &extended}) {
    CHECK(t->wave_step_angstrom == 1.25);
    CHECK(t->wavelength_medium == "air");
    CHECK(t->n_spaxels_side() == 300);
    // Resolving power 1770 at 480 nm and 3590 at 930 nm (ESO's overview) against the LSF curve.
    CHECK(4800.0 / t->lsf_fwhm_angstrom.at(4800.0) == Approx(1770).epsilon(0.1));
    CHECK(9300.0 / t->lsf_fwhm_angstrom.at(9300.0) == Approx(3590).epsilon(0.1));
  }
}

TEST_CASE("telescope presets: NIRSpec's PSF is JWST's diffraction limit at each wavelength",
          "[telescopes]") {
  // FWHM ~ lambda / D for the 6.5 m primary: 0.0317 arcsec at 1 um, 0.159 arcsec at 5 um.
  constexpr double kArcsecPerRadian = 180.0 / M_PI * 3600.0;
  for (const char* grating : {"G140H", "G140M", "G235H", "G235M", "G395H", "G395M"}) {
    const Telescope t = load_telescope_preset(std::string("JWST-NIRSpec-") + grating, "telescope");
    INFO(grating);
    for (double f : {0.0, 0.37, 1.0}) {
      const double lambda = t.wave_start_angstrom + f * (t.n_wave() - 1) * t.wave_step_angstrom;
      CHECK(t.psf_fwhm_arcsec.at(lambda) ==
            Approx(lambda * 1e-10 / 6.5 * kArcsecPerRadian).epsilon(1e-3));
    }
  }
}

TEST_CASE("telescope presets: SAMI's red arm beside its blue one", "[telescopes]") {
  // Croom et al. (2021): blue 370-570 nm at R = 1808, red 630-740 nm at R = 4304; the DR3 cubes
  // step 1.04 A (blue) and 0.57 A (red).
  const Telescope blue = load_telescope_preset("SAMI", "telescope");
  const Telescope red = load_telescope_preset("SAMI-red", "telescope");
  CHECK(red.wave_step_angstrom == 0.57);
  CHECK(red.wave_start_angstrom == 6300.0);
  CHECK(red.wave_start_angstrom + red.n_wave() * red.wave_step_angstrom == Approx(7400).margin(1));
  CHECK(6850.0 / red.lsf_fwhm_angstrom.at(6850.0) == Approx(4304).epsilon(0.05));
  CHECK(4750.0 / blue.lsf_fwhm_angstrom.at(4750.0) == Approx(1808).epsilon(0.05));
  CHECK(red.fov_arcsec == blue.fov_arcsec);
  CHECK(red.spaxel_arcsec == blue.spaxel_arcsec);
}

TEST_CASE("telescope presets: to_json gives back what parse_telescope reads, field by field",
          "[telescopes]") {
  // The runner hands stages the whole resolved telescope as JSON (pipeline/runner.cpp
  // run_context): every field must survive the trip, and absent parts must stay absent.
  for (const std::string& name : telescope_preset_names()) {
    INFO(name);
    const Telescope t = load_telescope_preset(name, "telescope");
    const nlohmann::json j = to_json(t);
    const Telescope u = parse_telescope(j, "telescope");
    CHECK(u.name == t.name);
    CHECK(u.fov_arcsec == t.fov_arcsec);
    CHECK(u.spaxel_arcsec == t.spaxel_arcsec);
    CHECK(u.aperture == t.aperture);
    CHECK(u.wave_start_angstrom == t.wave_start_angstrom);
    CHECK(u.wave_end_angstrom == t.wave_end_angstrom);
    CHECK(u.wave_step_angstrom == t.wave_step_angstrom);
    CHECK(u.wave_log10_step == t.wave_log10_step);
    CHECK(u.n_wave() == t.n_wave());
    CHECK(u.wavelength_medium == t.wavelength_medium);
    CHECK(u.fits_layout == t.fits_layout);
    CHECK(u.lsf_fwhm_angstrom.wavelength_angstrom == t.lsf_fwhm_angstrom.wavelength_angstrom);
    CHECK(u.lsf_fwhm_angstrom.fwhm == t.lsf_fwhm_angstrom.fwhm);
    CHECK(u.psf_fwhm_arcsec.fwhm == t.psf_fwhm_arcsec.fwhm);
    CHECK(u.collecting_area_m2 == t.collecting_area_m2);
    CHECK(u.has_throughput() == t.has_throughput());
    CHECK(j.contains("throughput") == t.has_throughput());
    CHECK(u.throughput.fwhm == t.throughput.fwhm);
    CHECK(u.site == t.site);
    CHECK(j.contains("site") == !t.site.empty());
    REQUIRE(u.fibres.has_value() == t.fibres.has_value());
    if (t.fibres) {
      CHECK(u.fibres->n_fibres == t.fibres->n_fibres);
      CHECK(u.fibres->core_diameter_arcsec == t.fibres->core_diameter_arcsec);
      CHECK(u.fibres->dither_x_arcsec == t.fibres->dither_x_arcsec);
    }
  }
}

TEST_CASE("telescope presets: CALIFA's V500 and V1200 setups", "[telescopes]") {
  // Sanchez et al. (2016, A&A 594, A36, table 1): V500 3749-7501 A sampled at 2.0 A with a
  // 6.0 A FWHM (R ~ 850 at 5000 A), V1200 3650-4840 A at 0.7 A with 2.3 A (Husemann et al. 2013);
  // both 1 arcsec spaxels over PPak's 74 arcsec hexagon, air wavelengths.
  const Telescope v500 = load_telescope_preset("CALIFA", "telescope");
  const Telescope v1200 = load_telescope_preset("CALIFA-V1200", "telescope");
  CHECK(v500.wave_start_angstrom == 3749.0);
  CHECK(v500.wave_step_angstrom == 2.0);
  CHECK(v500.wave_start_angstrom + v500.n_wave() * v500.wave_step_angstrom ==
        Approx(7501).margin(2));
  CHECK(5000.0 / v500.lsf_fwhm_angstrom.at(5000.0) == Approx(850).epsilon(0.03));
  CHECK(v1200.wave_start_angstrom == 3650.0);
  CHECK(v1200.wave_step_angstrom == 0.7);
  CHECK(v1200.wave_start_angstrom + v1200.n_wave() * v1200.wave_step_angstrom ==
        Approx(4840).margin(0.7));
  CHECK(v1200.lsf_fwhm_angstrom.at(4500.0) == 2.3);
  for (const Telescope* t : {&v500, &v1200}) {
    CHECK(t->spaxel_arcsec == 1.0);
    CHECK(t->fov_arcsec == 74.0);
    CHECK(t->aperture == ApertureShape::hexagonal);
    CHECK(t->wavelength_medium == "air");
  }
}
