#pragma once
// Reverse mode (issue 27, docs/gradients.md): the cotangent of a cube, dL/d voxel for a loss L,
// which each differentiable stage turns, back to front, into the cotangent of what it was given,
// down to the particles' fields.
#include <map>
#include <string>
#include <vector>

#include "data/datacube.h"

namespace ifusim {

// dL/d voxel of a cube of `shape`, spaxel-major like Cube::data. Held in double: the adjoints'
// sums are made and kept in double (the forward cube is float, rounded once).
struct CubeCotangent {
  CubeShape shape;
  std::vector<double> data;  // shape.n_voxels()
};

// dL/d field for every particle, keyed by the names Galaxy.from_arrays takes
// ("stars.initial_mass_msun", "stars.age_gyr", "stars.velocity_kms", ...): each rows x
// components values, row-major, in the field's order of particles.
struct ParticleGradients {
  std::map<std::string, std::vector<double>> fields;
};

}  // namespace ifusim
