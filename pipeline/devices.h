#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/mesh.h"

namespace ifusim {

// The mesh a run uses.
// - cpu: n_devices host devices (default 1), each with its own share of the OpenMP threads, as
//   XLA's --xla_force_host_platform_device_count does for JAX.
// - cuda: one device per GPU of this process (gpus_of_process) by default (n_devices = 0); more
//   logical devices than GPUs are allowed, dealt round-robin over them, each with its own
//   stream and buffers.
// Throws with a plain message when the backend cannot provide them (no GPU, bad count).
// `spans_processes`: the mesh is this process's part of a run across processes (Mesh).
std::unique_ptr<Mesh> make_mesh(Backend backend, int n_devices = 0, bool spans_processes = false);

// The GPUs (ordinals) one process of `local_size` on a node takes of the node's `gpus`: all of
// them alone; with several processes (an MPI survey or run) each its own, g % local_size ==
// local_rank, so that they never share a GPU while there are enough; with more processes than
// GPUs, GPU local_rank % gpus (shared, and said so in the devices' descriptions).
std::vector<int> gpus_of_process(int gpus, int local_rank, int local_size);

// The OpenMP threads the cpu backend deals out to host devices.
int host_thread_count();

// A run's device count, checked before the mesh is made (the config key or option is named by
// `source`): on the cpu backend at least one host device and, unless `oversubscribe`, no more
// than there are threads, since each host device runs on threads of its own. Devices sharing
// threads give the same cube but only slow the run; tests use them to check sharding.
void check_run_device_count(Backend backend, int n_devices, bool oversubscribe,
                            const std::string& source);

}  // namespace ifusim
