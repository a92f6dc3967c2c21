#pragma once
// The processes of a run that mpirun started (MPI_COMM_WORLD), or this process alone. MPI is
// initialised on first use, and only when an MPI launcher started the process (Open MPI's
// OMPI_COMM_WORLD_SIZE, a PMI or PMIx rank in the environment), so a program run on its own never
// touches MPI. Calls come from the thread that first asked (MPI_THREAD_FUNNELED).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace ifusim::processes {

int rank();  // 0 alone
int size();  // 1 alone
// This process among those of the run on the same node (shared memory): 0 and 1 alone.
int local_rank();
int local_size();

// A text message to process `to`, with a tag (the kind of message).
void send(int to, int tag, const std::string& message);
// The next message with `tag` from any process; `from` receives its sender.
std::string receive(int tag, int* from);

// Ends every process of the run with `code` (MPI_Abort) where there are several; returns alone.
void abort_all(int code);

// Sums int64 values over every process, in place: each gets the exact total.
void allreduce_sum(std::int64_t* values, std::size_t n);
// Every process's bytes, in rank order, on every process.
std::vector<std::string> allgather(const std::string& mine);

// Every process's values, in rank order, on every process.
template <class T>
std::vector<std::vector<T>> allgather_values(const std::vector<T>& mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::string bytes(mine.size() * sizeof(T), '\0');
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<std::vector<T>> out;
  for (const std::string& theirs : allgather(bytes)) {
    out.emplace_back(theirs.size() / sizeof(T));
    if (!theirs.empty()) std::memcpy(out.back().data(), theirs.data(), theirs.size());
  }
  return out;
}

}  // namespace ifusim::processes
