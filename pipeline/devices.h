#pragma once
#include <memory>

#include "data/mesh.h"

namespace ifusim {

// The mesh a run uses.
// - cpu: n_devices host devices (default 1), each with its own share of the OpenMP threads, as
//   XLA's --xla_force_host_platform_device_count does for JAX.
// - cuda: one device per GPU by default (n_devices = 0); more logical devices than GPUs are
//   allowed, dealt round-robin over the GPUs, each with its own stream and buffers.
// Throws with a plain message when the backend cannot provide them (no GPU, bad count).
std::unique_ptr<Mesh> make_mesh(Backend backend, int n_devices = 0);

}  // namespace ifusim
