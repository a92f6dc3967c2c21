// The CUDA side of the runtime: device discovery, streams, memory. Every call is checked.
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "data/cuda_impl.h"

namespace ifusim::cuda_impl {
namespace {
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}
cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}
}  // namespace

int device_count(std::string* reason) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (reason) *reason = std::string("no usable CUDA GPU: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  if (n == 0 && reason) *reason = "no CUDA GPU found";
  return n;
}

std::string device_name(int gpu_ordinal) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, gpu_ordinal), "cudaGetDeviceProperties");
  return prop.name;
}

std::size_t free_memory_bytes(int gpu_ordinal) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

void* create_stream(int gpu_ordinal) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

void destroy_stream(int gpu_ordinal, void* stream) noexcept {
  if (cudaSetDevice(gpu_ordinal) == cudaSuccess) cudaStreamDestroy(as_stream(stream));
}

void set_device(int gpu_ordinal) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
}

void* allocate(int gpu_ordinal, std::size_t bytes) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but cleared so that no later check reports it again
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    char message[256];
    std::snprintf(message, sizeof message,
                  "out of GPU memory: %.3f GB asked on GPU %d (%s), %.3f GB of its %.3f GB free; "
                  "run with more devices (--devices) or stream the stars "
                  "(input.stream_block_stars), and see `ifusim plan`",
                  static_cast<double>(bytes) / 1e9, gpu_ordinal, device_name(gpu_ordinal).c_str(),
                  static_cast<double>(free) / 1e9, static_cast<double>(total) / 1e9);
    throw std::runtime_error(message);
  }
  check(err, "cudaMalloc");
  return ptr;
}

void release(int gpu_ordinal, void* ptr) noexcept {
  if (cudaSetDevice(gpu_ordinal) == cudaSuccess) cudaFree(ptr);
}

void copy(int gpu_ordinal, void* stream, void* dst, const void* src, std::size_t bytes) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

// Returns when the memory is zero. A partial array's buffer is shared by every logical device
// on its GPU (sharded_array.h), and the others add into it on their own non-blocking streams,
// which nothing would order after a memset left pending on the owner's stream.
void fill_zero(int gpu_ordinal, void* stream, void* dst, std::size_t bytes) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  check(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)), "cudaMemsetAsync");
  check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

void synchronize(int gpu_ordinal, void* stream) {
  check(cudaSetDevice(gpu_ordinal), "cudaSetDevice");
  check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

void* allocate_pinned(int gpu_ordinal, std::size_t bytes) noexcept {
  void* ptr = nullptr;
  if (cudaSetDevice(gpu_ordinal) != cudaSuccess ||
      cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();  // a refused pin is handled (pageable memory instead), not an error
    return nullptr;
  }
  return ptr;
}

void release_pinned(void* ptr) noexcept {
  cudaFreeHost(ptr);
}

}  // namespace ifusim::cuda_impl
