#pragma once
// Owning device memory (DeviceBuffer) and the non-owning views kernels receive (Span).
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "data/device.h"
#include "data/hd.h"

namespace ifusim {

// A view of contiguous elements in one device's memory: what kernels and functors receive.
template <class T>
struct Span {
  T* data = nullptr;
  std::size_t size = 0;

  Span() = default;
  IFUSIM_HD Span(T* d, std::size_t n) : data(d), size(n) {}
  // A view of mutable elements is also a view of const ones.
  template <class U>
  requires std::is_same_v<const U, T> IFUSIM_HD Span(Span<U> other)
      : data(other.data), size(other.size) {}

  IFUSIM_HD T& operator[](std::size_t i) const { return data[i]; }
  IFUSIM_HD bool empty() const { return size == 0; }
};

// Raw memory on a device; implemented per backend (memory.cpp, memory_cuda.cu).
namespace memory {
void* allocate(const Device& device, std::size_t bytes);
void release(const Device& device, void* ptr) noexcept;
void copy_to_device(const Device& device, void* dst, const void* host_src, std::size_t bytes);
void copy_to_host(const Device& device, void* host_dst, const void* src, std::size_t bytes);
void copy_on_device(const Device& device, void* dst, const void* src, std::size_t bytes);
// Returns when the bytes are zero, so that work of any logical device on the same GPU (its own
// stream) sees them.
void fill_zero(const Device& device, void* dst, std::size_t bytes);
void synchronize(const Device& device);
// Host memory that transfers to and from `device` read or fill: page-locked (pinned) where the
// device is a GPU, so that cudaMemcpyAsync moves it by DMA at the link's speed instead of
// staging pageable memory through the driver's own small buffers; 64-byte aligned ordinary
// memory otherwise, or where the GPU runtime cannot pin it (then *pinned is false).
void* allocate_host(const Device& device, std::size_t bytes, bool* pinned);
void release_host(void* ptr, bool pinned) noexcept;
// Bytes currently allocated, and the peak since the last reset, over all devices of a backend.
std::size_t bytes_in_use(Backend backend);
std::size_t peak_bytes(Backend backend);
void reset_peak(Backend backend);
}  // namespace memory

// Owning buffer of `size` elements of T on one device. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Device& device, std::size_t size) : device_(&device), size_(size) {
    if (size_ > 0) data_ = static_cast<T*>(memory::allocate(device, size_ * sizeof(T)));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() noexcept {
    if (data_) memory::release(*device_, data_);
    data_ = nullptr;
    size_ = 0;
  }
  void swap(DeviceBuffer& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  const Device& device() const { return *device_; }
  Span<T> view() const { return {data_, size_}; }
  Span<const T> cview() const { return {data_, size_}; }

  void upload(const T* host, std::size_t n, std::size_t offset = 0) {
    if (n) memory::copy_to_device(*device_, data_ + offset, host, n * sizeof(T));
  }
  void download(T* host, std::size_t n, std::size_t offset = 0) const {
    if (n) memory::copy_to_host(*device_, host, data_ + offset, n * sizeof(T));
  }
  void zero() {
    if (size_) memory::fill_zero(*device_, data_, size_ * sizeof(T));
  }

 private:
  const Device* device_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A reusable host block of `size` elements of T for one device's transfers (memory::
// allocate_host): the streaming reader's blocks, made once per device and filled block after
// block. Uninitialised. Move-only.
template <class T>
class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(const Device& device, std::size_t size) : size_(size) {
    if (size_ > 0)
      data_ = static_cast<T*>(memory::allocate_host(device, size_ * sizeof(T), &pinned_));
  }
  ~HostStaging() { memory::release_host(data_, pinned_); }
  HostStaging(HostStaging&& o) noexcept { swap(o); }
  HostStaging& operator=(HostStaging&& o) noexcept {
    HostStaging tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void swap(HostStaging& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(pinned_, o.pinned_);
  }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool pinned() const { return pinned_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  bool pinned_ = false;
};

}  // namespace ifusim
