// psum across physical GPUs: one NCCL all-reduce of int64 sums (exact, so reproducible).
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/collectives/psum.h"

namespace ifusim {
namespace {
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}
void check(cudaError_t err, const char* what, int gpu_ordinal) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("psum: ") + what + " on GPU " +
                             std::to_string(gpu_ordinal) + ": " + cudaGetErrorString(err));
}
}  // namespace

// The communicators of one mesh's GPUs, created once (ncclCommInitAll is collective and slow).
struct NcclCommunicators {
  std::vector<ncclComm_t> comms;
  ~NcclCommunicators() {
    for (auto c : comms) ncclCommDestroy(c);
  }
};

void nccl_allreduce_sum(const Mesh& mesh, const std::vector<const Device*>& devices,
                        const std::vector<std::int64_t*>& buffers, std::size_t count) {
  const int n = static_cast<int>(devices.size());
  if (!mesh.collective_state) {
    auto state = std::make_shared<NcclCommunicators>();
    std::vector<int> ordinals;
    for (const Device* d : devices) ordinals.push_back(d->gpu_ordinal);
    state->comms.resize(n);
    check(ncclCommInitAll(state->comms.data(), n, ordinals.data()), "ncclCommInitAll");
    mesh.collective_state = state;
  }
  const auto& comms = static_cast<NcclCommunicators*>(mesh.collective_state.get())->comms;
  check(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < n; ++i)
    check(ncclAllReduce(buffers[i], buffers[i], count, ncclInt64, ncclSum, comms[i],
                        static_cast<cudaStream_t>(devices[i]->stream)),
          "ncclAllReduce");
  check(ncclGroupEnd(), "ncclGroupEnd");
  for (int i = 0; i < n; ++i) {
    const int gpu = devices[i]->gpu_ordinal;
    check(cudaSetDevice(gpu), "cudaSetDevice", gpu);
    const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(devices[i]->stream));
    if (err != cudaSuccess) {
      // NCCL's own reason (a peer lost, a network error) where it has one, else CUDA's.
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comms[i], &async);
      throw std::runtime_error("psum: the NCCL all-reduce failed on GPU " + std::to_string(gpu) +
                               ": " + cudaGetErrorString(err) +
                               (async != ncclSuccess
                                    ? std::string(" (NCCL: ") + ncclGetErrorString(async) + ")"
                                    : std::string()));
    }
  }
}

}  // namespace ifusim
