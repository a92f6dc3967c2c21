#pragma once
// Reverse mode (issue 27, docs/gradients.md): the cotangent of a cube, dL/d voxel for a loss L,
// which each differentiable stage turns, back to front, into the cotangent of what it was given,
// down to the particles' fields.
#include <cstddef>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/datacube.h"
#include "data/host_memory.h"

namespace ifusim {

// dL/d voxel of a cube of `shape`, spaxel-major like Cube::data. Held in double: the adjoints'
// sums are made and kept in double (the forward cube is float, rounded once). Its values are held
// here, or borrowed: read in place from the caller's array (the cotangent handed to a VJP, 2.7 GB
// on MUSE-WFM) until a stage changes them, so that a backward pass whose first adjoint makes a new
// array (aperture_mask's margin, fibres) or whose particle stages only read copies nothing.
class CubeCotangent {
 public:
  CubeShape shape;

  CubeCotangent() = default;
  CubeCotangent(const CubeShape& shape, std::vector<double> values)
      : shape(shape), held_(std::move(values)) {}
  // `values` (shape.n_voxels() of them) read in place; the caller keeps them alive and unchanged
  // while this or a copy of it is in use.
  static CubeCotangent borrowing(const CubeShape& shape, const double* values) {
    CubeCotangent c;
    c.shape = shape;
    c.borrowed_ = std::span<const double>(values, shape.n_voxels());
    return c;
  }

  std::span<const double> values() const {
    return borrowed_.data() ? borrowed_ : std::span<const double>(held_);
  }
  // The values to change in place: borrowed ones are first copied here (on all threads).
  std::vector<double>& values_to_change() {
    if (borrowed_.data()) {
      held_ = large_copy(borrowed_.data(), borrowed_.size());
      borrowed_ = {};
    }
    return held_;
  }
  // New values of a new shape: a stage whose adjoint makes a new array (a crop's padding).
  void replace(const CubeShape& new_shape, std::vector<double> values) {
    shape = new_shape;
    held_ = std::move(values);
    borrowed_ = {};
  }

  // A particle stage's check that this is the cotangent of the cube it reduced to (`reduced`):
  // std::invalid_argument naming the stage and both shapes.
  void require_shape(const CubeShape& reduced, const std::string& stage) const {
    const std::size_t size = values().size();
    if (shape == reduced && size == reduced.n_voxels()) return;
    throw std::invalid_argument(stage + ": the cotangent is " + std::to_string(shape.nx) + " x " +
                                std::to_string(shape.ny) + " x " + std::to_string(shape.n_wave) +
                                " (" + std::to_string(size) + " values), the reduced cube " +
                                std::to_string(reduced.nx) + " x " + std::to_string(reduced.ny) +
                                " x " + std::to_string(reduced.n_wave));
  }

 private:
  std::vector<double> held_;
  std::span<const double> borrowed_;
};

// dL/d field for every particle, keyed by the names Galaxy.from_arrays takes
// ("stars.initial_mass_msun", "stars.age_gyr", "stars.velocity_kms", ...): each rows x
// components values, row-major, in the field's order of particles.
struct ParticleGradients {
  std::map<std::string, std::vector<double>> fields;

  // The gradient `name` of `size` values that a stage adds to: zeros where no stage made it yet.
  // A size that differs from an earlier stage's is a fault: std::logic_error naming `stage`.
  std::vector<double>& add_to(const std::string& name, std::size_t size, const std::string& stage) {
    std::vector<double>& out = fields[name];
    if (out.empty()) out = large_vector<double>(size, 0.0);
    if (out.size() != size)
      throw std::logic_error(stage + ": gradient " + name + " has " + std::to_string(out.size()) +
                             " values, not " + std::to_string(size));
    return out;
  }
};

}  // namespace ifusim
