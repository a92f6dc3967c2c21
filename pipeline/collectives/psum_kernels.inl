// psum's device-side reduction: one source for both backends.
namespace ifusim::IFUSIM_BACKEND_NS {

struct AddInto {
  std::int64_t* target;
  const std::int64_t* addend;
  IFUSIM_HD void operator()(std::size_t i) const { target[i] += addend[i]; }
};

void add_into(const Device& device, Span<std::int64_t> target, Span<const std::int64_t> addend) {
  parallel_for(device, target.size, AddInto{target.data, addend.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
