#include "data/collectives/processes.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <thread>

#ifdef IFUSIM_HAVE_MPI
// The C API only: Open MPI's and MPICH's deprecated C++ bindings stay out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace ifusim::processes {
namespace {

// The process count an MPI launcher announced (Open MPI, MPICH's Hydra (PMI), PMIx), or 0.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return std::getenv("PMIX_RANK") ? 1 : 0;
}

struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the processes sharing this node's memory
  World() {
    const int launched = launcher_size();
#ifdef IFUSIM_HAVE_MPI
    if (launched > 0) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      // The processes on this node (MPI-3's shared-memory split): Open MPI, MPICH and Slurm
      // launchers alike, where OMPI_COMM_WORLD_LOCAL_RANK is Open MPI's alone.
      MPI_Comm node = MPI_COMM_NULL;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local_rank);
      MPI_Comm_size(node, &local_size);
      MPI_Comm_free(&node);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
#else
    if (launched > 1)
      throw std::runtime_error("started by an MPI launcher with " + std::to_string(launched) +
                               " processes, but this ifusim was built without MPI "
                               "(-DIFUSIM_MPI=OFF): run it alone");
#endif
  }
};

World& world() {
  static World w;
  return w;
}

}  // namespace

int rank() {
  return world().rank;
}

int size() {
  return world().size;
}

int local_rank() {
  return world().local_rank;
}

int local_size() {
  return world().local_size;
}

void send(int to, int tag, const std::string& message) {
#ifdef IFUSIM_HAVE_MPI
  if (world().size > 1) {
    MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, to, tag, MPI_COMM_WORLD);
    return;
  }
#endif
  (void)message;
  (void)tag;
  throw std::logic_error("processes::send to " + std::to_string(to) + " in a run of one process");
}

std::string receive(int tag, int* from) {
#ifdef IFUSIM_HAVE_MPI
  if (world().size > 1) {
    // Polled with a pause, not MPI_Probe: a blocking probe spins on a core that process 0's
    // own cubes (or a worker's next one) need.
    MPI_Status status;
    for (int arrived = 0;;) {
      MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &arrived, &status);
      if (arrived) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string message(static_cast<std::size_t>(count), '\0');
    MPI_Recv(message.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (from) *from = status.MPI_SOURCE;
    return message;
  }
#endif
  (void)tag;
  (void)from;
  throw std::logic_error("processes::receive in a run of one process");
}

void abort_all(int code) {
#ifdef IFUSIM_HAVE_MPI
  if (world().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  (void)code;
}

void allreduce_sum(std::int64_t* values, std::size_t n) {
#ifdef IFUSIM_HAVE_MPI
  if (world().size > 1) {
    constexpr std::size_t kChunk = std::size_t(1) << 28;  // MPI counts are int
    for (std::size_t first = 0; first < n; first += kChunk)
      MPI_Allreduce(MPI_IN_PLACE, values + first, static_cast<int>(std::min(kChunk, n - first)),
                    MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  }
#endif
  (void)values;
  (void)n;
}

std::vector<std::string> allgather(const std::string& mine) {
#ifdef IFUSIM_HAVE_MPI
  if (world().size > 1) {
    const int k = world().size;
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::runtime_error("processes::allgather: more than 2 GB from one process");
    int size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(k)), offsets(static_cast<std::size_t>(k), 0);
    MPI_Allgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::size_t total = 0;
    for (int r = 0; r < k; ++r) {
      offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]);
    }
    if (total > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::runtime_error("processes::allgather: more than 2 GB in all");
    std::string all(total, '\0');
    MPI_Allgatherv(mine.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                   MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (int r = 0; r < k; ++r)
      out.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                               static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)])));
    return out;
  }
#endif
  return {mine};
}

}  // namespace ifusim::processes
