#pragma once
// The backends' runtime: which GPUs exist, streams, and binding a host thread to a device.
#include <cstddef>
#include <string>

#include "data/device.h"

namespace ifusim::runtime {

bool cuda_built();        // was this binary built with the CUDA backend?
int cuda_device_count();  // 0 when not built or when no GPU is usable
std::string cuda_device_name(int gpu_ordinal);
std::string cuda_unavailable_reason();  // why cuda_device_count() is 0, in words
// Memory a device can still allocate: free GPU memory, or the host's MemAvailable.
std::size_t free_memory_bytes(const Device& device);
void* create_stream(int gpu_ordinal);  // a cudaStream_t, opaque
void destroy_stream(int gpu_ordinal, void* stream) noexcept;

// Makes the calling host thread work on `device`: cudaSetDevice for CUDA, the OpenMP thread
// count of this device's share for CPU (an ICV of the calling thread only).
void bind_current_thread(const Device& device);

}  // namespace ifusim::runtime
