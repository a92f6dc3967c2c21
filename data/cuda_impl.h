#pragma once
// Internal: the CUDA side of runtime.h and buffer.h, defined in runtime_cuda.cu. Only
// runtime.cpp calls these, and only when IFUSIM_HAVE_CUDA is defined.
#include <cstddef>
#include <string>

namespace ifusim::cuda_impl {
int device_count(std::string* reason);
std::string device_name(int gpu_ordinal);
std::size_t free_memory_bytes(int gpu_ordinal);
void* create_stream(int gpu_ordinal);
void destroy_stream(int gpu_ordinal, void* stream) noexcept;
void set_device(int gpu_ordinal);
void* allocate(int gpu_ordinal, std::size_t bytes);
void release(int gpu_ordinal, void* ptr) noexcept;
void copy(int gpu_ordinal, void* stream, void* dst, const void* src, std::size_t bytes);
void fill_zero(int gpu_ordinal, void* stream, void* dst, std::size_t bytes);
void synchronize(int gpu_ordinal, void* stream);
// Page-locked host memory; nullptr where the runtime cannot pin that much (the caller falls back).
void* allocate_pinned(int gpu_ordinal, std::size_t bytes) noexcept;
void release_pinned(void* ptr) noexcept;
}  // namespace ifusim::cuda_impl
