// psum across physical GPUs: one NCCL all-reduce of int64 sums (exact, so reproducible).
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/collectives/psum.h"

namespace ifusim {
namespace {
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}
}  // namespace

void nccl_allreduce_sum(const std::vector<const Device*>& devices,
                        const std::vector<std::int64_t*>& buffers, std::size_t count) {
  const int n = static_cast<int>(devices.size());
  std::vector<int> ordinals;
  for (const Device* d : devices) ordinals.push_back(d->gpu_ordinal);
  std::vector<ncclComm_t> comms(n);
  check(ncclCommInitAll(comms.data(), n, ordinals.data()), "ncclCommInitAll");
  try {
    check(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i)
      check(ncclAllReduce(buffers[i], buffers[i], count, ncclInt64, ncclSum, comms[i],
                          static_cast<cudaStream_t>(devices[i]->stream)),
            "ncclAllReduce");
    check(ncclGroupEnd(), "ncclGroupEnd");
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(devices[i]->gpu_ordinal);
      if (cudaStreamSynchronize(static_cast<cudaStream_t>(devices[i]->stream)) != cudaSuccess)
        throw std::runtime_error("psum: NCCL all-reduce failed on GPU " +
                                 std::to_string(ordinals[i]));
    }
  } catch (...) {
    for (auto c : comms) ncclCommDestroy(c);
    throw;
  }
  for (auto c : comms) ncclCommDestroy(c);
}

}  // namespace ifusim
