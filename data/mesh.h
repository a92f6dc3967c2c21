#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/device.h"

namespace ifusim {

// The devices of a run along the named axis "particles" (jax.make_mesh((n,), ("particles",))).
// Devices live at stable addresses for the mesh's lifetime: buffers refer to them.
class Mesh {
 public:
  // `spans_processes`: the mesh is this process's part of a run across the processes mpirun
  // started (mpirun ifusim run).
  Mesh(Backend backend, std::vector<Device> devices, std::string axis_name = "particles",
       bool spans_processes = false);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  Backend backend() const { return backend_; }
  const std::string& axis_name() const { return axis_name_; }
  std::size_t size() const { return devices_.size(); }
  const Device& device(std::size_t i) const { return *devices_.at(i); }
  std::string describe() const;  // one line per device

  // Devices that share one memory space (all host devices; the logical devices of one GPU) hold
  // one partial array between them: the first device of each space owns it.
  std::size_t memory_owner(std::size_t i) const { return memory_owner_.at(i); }
  // Whether another device shares `device`'s memory space (and so its partial arrays, into
  // which both add at once).
  bool shares_memory(const Device& device) const;
  std::vector<const Device*> memory_owners() const;

  // Whether the mesh is one process's part of a run across processes (mpirun ifusim run): its
  // collectives then also sum over the processes (data/collectives/processes.h).
  bool spans_processes() const { return spans_processes_; }
  // This process's rank and the number of processes the run spans (0 and 1 for a mesh that does
  // not span processes), and whether block b of a run's particles is this process's: the blocks
  // are dealt round-robin, b to process b mod K. Every pass over the blocks asks here.
  int process_rank() const;
  int process_count() const;
  bool owns_block(std::size_t block) const {
    return block % static_cast<std::size_t>(process_count()) ==
           static_cast<std::size_t>(process_rank());
  }

  // State a collective keeps for the mesh's lifetime (the NCCL communicators, created once).
  mutable std::shared_ptr<void> collective_state;

 private:
  Backend backend_;
  std::string axis_name_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::size_t> memory_owner_;
  bool spans_processes_ = false;
};

// Runs fn once per device, concurrently, each on a host thread bound to its device
// (jax.shard_map's per-device program). Rethrows the first exception after all have finished.
void shard_map(const Mesh& mesh, const std::function<void(const Device&)>& fn);

}  // namespace ifusim
