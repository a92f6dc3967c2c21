#include "io/tng/tng_rows.h"

#include <stdexcept>
#include <utility>

namespace ifusim::tng {
namespace {

// Rows [begin, end) of a row-major field of `components` values a row.
template <class T>
void copy_rows(const std::vector<T>& from, std::size_t components, std::size_t begin,
               std::size_t end, std::vector<T>& to) {
  to.assign(from.begin() + static_cast<std::ptrdiff_t>(begin * components),
            from.begin() + static_cast<std::ptrdiff_t>(end * components));
}

template <class T>
void check_length(const std::vector<T>& field, std::size_t rows, std::size_t components,
                  const char* name) {
  if (field.size() != rows * components)
    throw std::invalid_argument(std::string("TngHeldGalaxy: ") + name + " holds " +
                                std::to_string(field.size()) + " values, expected " +
                                std::to_string(rows * components));
}

void check_range(std::size_t begin, std::size_t end, std::size_t rows, const char* what) {
  if (begin > end || end > rows)
    throw std::out_of_range(std::string("TngHeldGalaxy: ") + what + " rows outside [0, " +
                            std::to_string(rows) + ")");
}

}  // namespace

TngHeldGalaxy::TngHeldGalaxy(TngGalaxyRecord record, TngStarRows stars, TngGasRows gas,
                             std::size_t block_rows)
    : record_(std::move(record)),
      stars_(std::move(stars)),
      gas_(std::move(gas)),
      block_rows_(block_rows) {
  const std::size_t ns = stars_.size(), ng = gas_.size();
  check_length(stars_.coordinates, ns, 3, "stars.coordinates");
  check_length(stars_.velocities, ns, 3, "stars.velocities");
  check_length(stars_.initial_masses, ns, 1, "stars.initial_masses");
  check_length(stars_.metallicity, ns, 1, "stars.metallicity");
  check_length(stars_.formation_time, ns, 1, "stars.formation_time");
  check_length(stars_.particle_ids, ns, 1, "stars.particle_ids");
  check_length(gas_.coordinates, ng, 3, "gas.coordinates");
  check_length(gas_.velocities, ng, 3, "gas.velocities");
  check_length(gas_.density, ng, 1, "gas.density");
  check_length(gas_.internal_energy, ng, 1, "gas.internal_energy");
  check_length(gas_.electron_abundance, ng, 1, "gas.electron_abundance");
  check_length(gas_.metallicity, ng, 1, "gas.metallicity");
  check_length(gas_.metals, ng, TngGasRows::kMetals, "gas.metals");
  check_length(gas_.star_formation_rate, ng, 1, "gas.star_formation_rate");
  check_length(gas_.particle_ids, ng, 1, "gas.particle_ids");
  record_.n_stars = ns;
  record_.n_gas = ng;
}

void TngHeldGalaxy::star_rows(std::size_t begin, std::size_t end, TngStarRows& out) const {
  check_range(begin, end, stars_.size(), "star");
  copy_rows(stars_.coordinates, 3, begin, end, out.coordinates);
  copy_rows(stars_.velocities, 3, begin, end, out.velocities);
  copy_rows(stars_.masses, 1, begin, end, out.masses);
  copy_rows(stars_.initial_masses, 1, begin, end, out.initial_masses);
  copy_rows(stars_.metallicity, 1, begin, end, out.metallicity);
  copy_rows(stars_.formation_time, 1, begin, end, out.formation_time);
  copy_rows(stars_.particle_ids, 1, begin, end, out.particle_ids);
}

void TngHeldGalaxy::gas_rows(std::size_t begin, std::size_t end, TngGasRows& out) const {
  check_range(begin, end, gas_.size(), "gas");
  copy_rows(gas_.coordinates, 3, begin, end, out.coordinates);
  copy_rows(gas_.velocities, 3, begin, end, out.velocities);
  copy_rows(gas_.masses, 1, begin, end, out.masses);
  copy_rows(gas_.density, 1, begin, end, out.density);
  copy_rows(gas_.internal_energy, 1, begin, end, out.internal_energy);
  copy_rows(gas_.electron_abundance, 1, begin, end, out.electron_abundance);
  copy_rows(gas_.metallicity, 1, begin, end, out.metallicity);
  copy_rows(gas_.metals, TngGasRows::kMetals, begin, end, out.metals);
  copy_rows(gas_.star_formation_rate, 1, begin, end, out.star_formation_rate);
  copy_rows(gas_.particle_ids, 1, begin, end, out.particle_ids);
}

}  // namespace ifusim::tng
