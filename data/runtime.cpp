#include "data/runtime.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "data/buffer.h"
#include "data/cuda_impl.h"
#include "data/host_memory.h"

namespace ifusim {

const char* to_string(Backend backend) {
  return backend == Backend::cuda ? "cuda" : "cpu";
}

Backend backend_from_string(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  throw std::invalid_argument("backend: expected \"cpu\" or \"cuda\", got \"" + name + "\"");
}

namespace {

[[noreturn, maybe_unused]] void no_cuda() {
  throw std::runtime_error("this ifusim was built without the CUDA backend (configure with nvcc)");
}

struct MemoryCounter {
  std::atomic<std::size_t> in_use{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t bytes) {
    const std::size_t now = in_use.fetch_add(bytes) + bytes;
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};
MemoryCounter counters[2];
MemoryCounter& counter(Backend b) {
  return counters[b == Backend::cuda ? 1 : 0];
}

// Host allocation sizes are kept in a header so that release() can account for them; CUDA
// ones in a table, since CUDA does not tell a pointer's size.
constexpr std::size_t kHostHeader = 64;  // keeps the payload 64-byte aligned
[[maybe_unused]] std::mutex cuda_sizes_mutex;
[[maybe_unused]] std::unordered_map<void*, std::size_t> cuda_sizes;

}  // namespace

namespace runtime {

bool cuda_built() {
#ifdef IFUSIM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef IFUSIM_HAVE_CUDA
  return cuda_impl::device_count(nullptr);
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#ifdef IFUSIM_HAVE_CUDA
  std::string reason;
  return cuda_impl::device_count(&reason) > 0 ? "" : reason;
#else
  return "this ifusim was built without the CUDA backend";
#endif
}

std::string cuda_device_name(int gpu_ordinal) {
#ifdef IFUSIM_HAVE_CUDA
  return cuda_impl::device_name(gpu_ordinal);
#else
  (void)gpu_ordinal;
  no_cuda();
#endif
}

std::size_t free_memory_bytes(const Device& device) {
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    return cuda_impl::free_memory_bytes(device.gpu_ordinal);
#else
    no_cuda();
#endif
  }
  // The host: what the kernel says can be had without swapping (Linux >= 3.14).
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

void* create_stream(int gpu_ordinal) {
#ifdef IFUSIM_HAVE_CUDA
  return cuda_impl::create_stream(gpu_ordinal);
#else
  (void)gpu_ordinal;
  no_cuda();
#endif
}

void destroy_stream([[maybe_unused]] int gpu_ordinal, [[maybe_unused]] void* stream) noexcept {
#ifdef IFUSIM_HAVE_CUDA
  cuda_impl::destroy_stream(gpu_ordinal, stream);
#endif
}

void bind_current_thread(const Device& device) {
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    cuda_impl::set_device(device.gpu_ordinal);
#else
    no_cuda();
#endif
  } else {
    omp_set_num_threads(std::max(1, device.n_threads));
  }
}

}  // namespace runtime

namespace memory {

void* allocate(const Device& device, std::size_t bytes) {
  void* ptr = nullptr;
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    ptr = cuda_impl::allocate(device.gpu_ordinal, bytes);
    std::lock_guard lock(cuda_sizes_mutex);
    cuda_sizes[ptr] = bytes;
#else
    no_cuda();
#endif
  } else {
    const std::size_t total = (bytes + kHostHeader + 63) / 64 * 64;
    auto* raw = static_cast<unsigned char*>(std::aligned_alloc(64, total));
    if (!raw) throw std::bad_alloc();
    // Large buffers (partial cubes, dense histograms) ask for huge pages over their interior,
    // which makes their first writes cheap (host_memory.h).
    advise_huge_pages(raw, total);
    std::memcpy(raw, &bytes, sizeof bytes);
    ptr = raw + kHostHeader;
  }
  counter(device.backend).add(bytes);
  return ptr;
}

void release(const Device& device, void* ptr) noexcept {
  if (!ptr) return;
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    cuda_impl::release(device.gpu_ordinal, ptr);
    std::lock_guard lock(cuda_sizes_mutex);
    if (auto it = cuda_sizes.find(ptr); it != cuda_sizes.end()) {
      counter(Backend::cuda).in_use.fetch_sub(it->second);
      cuda_sizes.erase(it);
    }
#endif
  } else {
    auto* raw = static_cast<unsigned char*>(ptr) - kHostHeader;
    std::size_t bytes = 0;
    std::memcpy(&bytes, raw, sizeof bytes);
    counter(Backend::cpu).in_use.fetch_sub(bytes);
    std::free(raw);
  }
}

void copy_to_device(const Device& device, void* dst, const void* src, std::size_t bytes) {
  copy_on_device(device, dst, src, bytes);
}
void copy_to_host(const Device& device, void* dst, const void* src, std::size_t bytes) {
  copy_on_device(device, dst, src, bytes);
}
void copy_on_device(const Device& device, void* dst, const void* src, std::size_t bytes) {
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    cuda_impl::copy(device.gpu_ordinal, device.stream, dst, src, bytes);
#else
    no_cuda();
#endif
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void fill_zero(const Device& device, void* dst, std::size_t bytes) {
  if (device.is_cuda()) {
#ifdef IFUSIM_HAVE_CUDA
    cuda_impl::fill_zero(device.gpu_ordinal, device.stream, dst, bytes);
#else
    no_cuda();
#endif
  } else {
    zero_bytes(dst, bytes);
  }
}

void synchronize([[maybe_unused]] const Device& device) {
#ifdef IFUSIM_HAVE_CUDA
  if (device.is_cuda()) cuda_impl::synchronize(device.gpu_ordinal, device.stream);
#endif
}

void* allocate_host(const Device& device, std::size_t bytes, bool* pinned) {
  *pinned = false;
#ifdef IFUSIM_HAVE_CUDA
  if (device.is_cuda() && bytes > 0) {
    if (void* ptr = cuda_impl::allocate_pinned(device.gpu_ordinal, bytes)) {
      *pinned = true;
      return ptr;
    }
  }
#else
  (void)device;
#endif
  void* ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!ptr && bytes > 0) throw std::bad_alloc();
  return ptr;
}

void release_host(void* ptr, bool pinned) noexcept {
  if (!ptr) return;
#ifdef IFUSIM_HAVE_CUDA
  if (pinned) return cuda_impl::release_pinned(ptr);
#endif
  (void)pinned;
  std::free(ptr);
}

std::size_t bytes_in_use(Backend backend) {
  return counter(backend).in_use.load();
}
std::size_t peak_bytes(Backend backend) {
  return counter(backend).peak.load();
}
void reset_peak(Backend backend) {
  counter(backend).peak.store(counter(backend).in_use.load());
}

}  // namespace memory
}  // namespace ifusim
