#pragma once
// Orients the galaxy: face-on first, with the eigenvectors of the mass-weighted inertia tensor
// I_ij = sum m (r^2 delta_ij - x_i x_j) of the stars inside the stellar half-mass radius
// (sorted by eigenvalue, the largest, the disc's normal, becoming +z, turned to point along the
// stars' angular momentum), then the run's Euler angles. Stars and gas get the same rotation;
// the line of sight is +z.
//
// Euler angles (degrees), extrinsic about the fixed axes: first alpha about x, then beta about
// y, then gamma about z, R = Rz(gamma) Ry(beta) Rx(alpha). Presets: "face-on" (0, 0, 0) and
// "edge-on" (alpha = 90: the disc's normal turns to -y and the disc is seen along its plane).
//
// The tensor's sums are accumulated in 64-bit fixed point (data/fixed_point.h), so the rotation,
// like everything else, is the same bit for bit for any number of devices.
#include <array>
#include <cstdint>
#include <memory>

#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "stages/stage.h"

namespace ifusim {

using Matrix3 = std::array<double, 9>;  // row-major

struct OrientParams {
  bool align_face_on = true;
  double alpha_deg = 0.0, beta_deg = 0.0, gamma_deg = 0.0;
  static OrientParams from_json(JsonParams params);
};

// R = Rz(gamma) Ry(beta) Rx(alpha).
Matrix3 euler_rotation(double alpha_deg, double beta_deg, double gamma_deg);
// The face-on rotation from the 6 inertia-tensor sums (xx, yy, zz, xy, xz, yz) and the angular
// momentum (Lx, Ly, Lz).
Matrix3 face_on_rotation(const std::array<double, 6>& inertia,
                         const std::array<double, 3>& angular_momentum);

StageEntry orient_stage();
std::unique_ptr<Stage> make_orient_stage(const nlohmann::json& params, const std::string& path);

struct RotationMatrix {
  double m[9];
};

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void accumulate_inertia(const Device& device, Span<const float> x,
                                                Span<const float> y, Span<const float> z,
                                                Span<const float> vx, Span<const float> vy,
                                                Span<const float> vz, Span<const float> mass,
                                                double radius_kpc, double counts_per_unit,
                                                Span<std::int64_t> sums);
                        void rotate_vectors(const Device& device, ifusim::RotationMatrix rotation,
                                            Span<float> x, Span<float> y, Span<float> z);)
