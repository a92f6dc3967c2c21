#include "data/mesh.h"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "data/collectives/processes.h"
#include "data/runtime.h"

namespace ifusim {

Mesh::Mesh(Backend backend, std::vector<Device> devices, std::string axis_name,
           bool spans_processes)
    : backend_(backend), axis_name_(std::move(axis_name)), spans_processes_(spans_processes) {
  if (devices.empty()) throw std::invalid_argument("a mesh needs at least one device");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].backend != backend)
      throw std::invalid_argument("every device of a mesh must use the mesh's backend");
    devices[i].id = static_cast<int>(i);
    devices_.push_back(std::make_unique<Device>(std::move(devices[i])));
  }
  // The owner of a memory space is its first device: for host devices device 0, for a GPU the
  // first logical device dealt to it.
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    std::size_t owner = i;
    for (std::size_t j = 0; j < i && owner == i; ++j)
      if (devices_[j]->is_cuda() == devices_[i]->is_cuda() &&
          (!devices_[i]->is_cuda() || devices_[j]->gpu_ordinal == devices_[i]->gpu_ordinal))
        owner = j;
    memory_owner_.push_back(owner);
  }
}

int Mesh::process_rank() const {
  return spans_processes_ ? processes::rank() : 0;
}

int Mesh::process_count() const {
  return spans_processes_ ? processes::size() : 1;
}

bool Mesh::shares_memory(const Device& device) const {
  const auto i = static_cast<std::size_t>(device.id);
  for (std::size_t j = 0; j < size(); ++j)
    if (j != i && memory_owner_[j] == memory_owner_.at(i)) return true;
  return false;
}

std::vector<const Device*> Mesh::memory_owners() const {
  std::vector<const Device*> out;
  for (std::size_t i = 0; i < size(); ++i)
    if (memory_owner_[i] == i) out.push_back(devices_[i].get());
  return out;
}

Mesh::~Mesh() {
  collective_state.reset();  // before the streams it may use
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
