#pragma once
// The nebular emission lines ifusim knows (the emission_lines stage, docs/emission_lines.md), by
// name: the stage's parameters and a user's table of line ratios (data/line_ratio_table.h) name
// them.
#include <string>

namespace ifusim {

struct EmissionLine {
  const char* name;  // also the maps' names: "flux_<name>"
  const char* label;
  double vacuum_angstrom;  // rest wavelength in vacuum
  double atomic_mass_amu;  // of the emitting atom (thermal width)
};

// Every line the stage can make, in wavelength order. Vacuum wavelengths of the SDSS line list
// (NIST atomic data).
inline constexpr EmissionLine kEmissionLines[] = {
    {"oii_3726", "[O II] 3726", 3727.092, 15.999},
    {"oii_3729", "[O II] 3729", 3729.875, 15.999},
    {"hdelta", "H-delta", 4102.892, 1.008},
    {"hgamma", "H-gamma", 4341.684, 1.008},
    {"hbeta", "H-beta", 4862.683, 1.008},
    {"oiii_4959", "[O III] 4959", 4960.295, 15.999},
    {"oiii_5007", "[O III] 5007", 5008.240, 15.999},
    {"oi_6300", "[O I] 6300", 6302.046, 15.999},
    {"nii_6548", "[N II] 6548", 6549.86, 14.007},
    {"halpha", "H-alpha", 6564.61, 1.008},
    {"nii_6584", "[N II] 6584", 6585.27, 14.007},
    {"sii_6716", "[S II] 6716", 6718.29, 32.06},
    {"sii_6731", "[S II] 6731", 6732.67, 32.06},
};
inline constexpr int kNumEmissionLines = sizeof(kEmissionLines) / sizeof(kEmissionLines[0]);

// The index of the line named `name` in kEmissionLines, or -1.
inline int emission_line_index(const std::string& name) {
  for (int i = 0; i < kNumEmissionLines; ++i)
    if (name == kEmissionLines[i].name) return i;
  return -1;
}

// Every line's name, comma-separated (for error messages).
inline std::string emission_line_names() {
  std::string out;
  for (const auto& l : kEmissionLines) out += (out.empty() ? "" : ", ") + std::string(l.name);
  return out;
}

// Whether line `index` is a Balmer line (H-alpha, H-beta, ...).
inline bool is_balmer_line(int index) {
  const std::string name = kEmissionLines[index].name;
  return name.rfind("h", 0) == 0;
}

}  // namespace ifusim
