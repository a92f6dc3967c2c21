#include "pipeline/devices.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/config_error.h"
#include "data/collectives/processes.h"
#include "data/runtime.h"

namespace ifusim {

int host_thread_count() {
  // The thread count as it was when first asked: shard_map binds the calling thread of a
  // one-device mesh to that device's share, which must not shrink the next mesh.
  static const int threads = std::max(1, omp_get_max_threads());
  return threads;
}

void check_run_device_count(Backend backend, int n_devices, bool oversubscribe,
                            const std::string& source) {
  if (backend != Backend::cpu) return;
  if (n_devices < 1)
    throw ConfigError(source + " " + std::to_string(n_devices) +
                      ": expected at least 1 host device on the cpu backend (0 means one per "
                      "GPU, for the cuda backend only)");
  const int threads = host_thread_count();
  if (n_devices > threads && !oversubscribe)
    throw ConfigError(source + " " + std::to_string(n_devices) + ": this process has " +
                      std::to_string(threads) +
                      " OpenMP threads, so at most that many host devices (each runs on "
                      "threads of its own); set devices.oversubscribe = true to run more, "
                      "sharing threads (the same cube, only slower: for testing sharding)");
}

std::unique_ptr<Mesh> make_mesh(Backend backend, int n_devices, bool spans_processes) {
  if (n_devices < 0) throw std::invalid_argument("--devices: expected a count >= 1");
  std::vector<Device> devices;
  if (backend == Backend::cpu) {
    const int count = std::max(1, n_devices);
    const int threads = host_thread_count();
    for (int i = 0; i < count; ++i) {
      Device d;
      d.backend = Backend::cpu;
      // Threads are dealt out like particles: threads / count each, one more to the first few.
      d.n_threads = std::max(1, threads / count + (i < threads % count ? 1 : 0));
      d.description = "cpu:" + std::to_string(i) + " (" + std::to_string(d.n_threads) + " thread" +
                      (d.n_threads == 1 ? ")" : "s)");
      devices.push_back(std::move(d));
    }
    return std::make_unique<Mesh>(backend, std::move(devices), "particles", spans_processes);
  }
  const int gpus = runtime::cuda_device_count();
  if (gpus == 0)
    throw std::runtime_error("the cuda backend has no GPU to run on: " +
                             runtime::cuda_unavailable_reason());
  const std::vector<int> mine =
      gpus_of_process(gpus, processes::local_rank(), processes::local_size());
  const int n_mine = static_cast<int>(mine.size());
  const int count = n_devices == 0 ? n_mine : n_devices;
  const bool shared = processes::local_size() > gpus;
  // The streams made so far are destroyed if a later one, a name or the mesh fails.
  try {
    for (int i = 0; i < count; ++i) {
      Device d;
      d.backend = Backend::cuda;
      d.gpu_ordinal = mine[static_cast<std::size_t>(i % n_mine)];
      d.logical_on_gpu = i / n_mine;
      d.stream = runtime::create_stream(d.gpu_ordinal);
      devices.push_back(d);
      const int k = i % n_mine;
      const int sharing = count / n_mine + (k < count % n_mine ? 1 : 0);
      devices.back().description =
          "cuda:" + std::to_string(i) + " (GPU " + std::to_string(d.gpu_ordinal) + " " +
          runtime::cuda_device_name(d.gpu_ordinal) + ", logical " +
          std::to_string(d.logical_on_gpu) + " of " + std::to_string(sharing) +
          (shared ? ", shared with other processes)" : ")");
    }
    // A copy: the mesh owns the streams once made (its destructor destroys them), the list
    // still names them if making it throws.
    return std::make_unique<Mesh>(backend, devices, "particles", spans_processes);
  } catch (...) {
    for (const Device& d : devices) runtime::destroy_stream(d.gpu_ordinal, d.stream);
    throw;
  }
}

std::vector<int> gpus_of_process(int gpus, int local_rank, int local_size) {
  if (gpus < 1 || local_size < 1 || local_rank < 0 || local_rank >= local_size)
    throw std::invalid_argument("gpus_of_process: expected gpus >= 1 and 0 <= rank < size");
  std::vector<int> mine;
  for (int g = local_rank % gpus; g < gpus; g += local_size) mine.push_back(g);
  return mine;
}

}  // namespace ifusim
