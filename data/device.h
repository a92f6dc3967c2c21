#pragma once
#include <cstddef>
#include <string>

namespace ifusim {

enum class Backend { cpu, cuda };

const char* to_string(Backend backend);
Backend backend_from_string(const std::string& name);  // throws on anything but "cpu" / "cuda"

// One place that computes (jax.Device). A CPU device is a share of the host's threads; a CUDA
// device is a logical device on one GPU with its own stream (several may share a GPU).
struct Device {
  int id = 0;  // position on the mesh, 0..D-1
  Backend backend = Backend::cpu;
  int n_threads = 1;        // cpu: OpenMP threads this device runs on
  int gpu_ordinal = -1;     // cuda: the physical GPU
  int logical_on_gpu = 0;   // cuda: index among the logical devices sharing that GPU
  void* stream = nullptr;   // cuda: its cudaStream_t, opaque so public headers carry no CUDA types
  std::string description;  // e.g. "cpu:0 (4 threads)", "cuda:1 on GPU 0 (NVIDIA H100)"

  bool is_cuda() const { return backend == Backend::cuda; }
};

}  // namespace ifusim
