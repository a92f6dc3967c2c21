#include "data/mesh.h"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "data/runtime.h"

namespace ifusim {

Mesh::Mesh(Backend backend, std::vector<Device> devices, std::string axis_name)
    : backend_(backend), axis_name_(std::move(axis_name)) {
  if (devices.empty()) throw std::invalid_argument("a mesh needs at least one device");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].backend != backend)
      throw std::invalid_argument("every device of a mesh must use the mesh's backend");
    devices[i].id = static_cast<int>(i);
    devices_.push_back(std::make_unique<Device>(std::move(devices[i])));
  }
}

Mesh::~Mesh() {
  for (auto& d : devices_)
    if (d->is_cuda() && d->stream) runtime::destroy_stream(d->gpu_ordinal, d->stream);
}

std::string Mesh::describe() const {
  std::string out = "mesh (" + axis_name_ + ": " + std::to_string(size()) + ") on backend " +
                    to_string(backend_) + "\n";
  for (const auto& d : devices_) out += "  " + d->description + "\n";
  return out;
}

void shard_map(const Mesh& mesh, const std::function<void(const Device&)>& fn) {
  if (mesh.size() == 1) {
    runtime::bind_current_thread(mesh.device(0));
    fn(mesh.device(0));
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  threads.reserve(mesh.size());
  for (std::size_t i = 0; i < mesh.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        runtime::bind_current_thread(mesh.device(i));
        fn(mesh.device(i));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace ifusim
