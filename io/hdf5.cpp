#include "io/hdf5.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ifusim::h5 {
namespace {

// HDF5 prints its error stack by default; ifusim reports errors itself. HDF5's own clean-up at
// exit is turned off (before the library starts): every file is closed by its Handle, and after
// a close that failed (a full disk) that clean-up dereferences the half-closed file and crashes
// the process (H5F__close_cb from H5_term_library, HDF5 1.10) instead of letting it exit 1.
// Debian's thread-safe HDF5 keeps the error-printing setting per thread, so each thread that
// opens a file turns it off for itself (a survey's cubes are made on worker threads).
void silence_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5dont_atexit(); });
  thread_local const bool silenced = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  (void)silenced;
}

// HDF5's sec2 driver puts the failed system call's errno in its message:
// "... errno = 28, error message = 'No space left on device', ...".
herr_t find_errno(unsigned, const H5E_error2_t* error, void* found) {
  const char* at = error->desc != nullptr ? std::strstr(error->desc, "errno = ") : nullptr;
  if (at != nullptr) *static_cast<int*>(found) = std::atoi(at + 8);
  return 0;
}

std::string join(const std::string& base, const std::string& child) {
  if (child.empty()) return base;
  if (!child.empty() && child[0] == '/') return child;
  return base == "/" ? "/" + child : base + "/" + child;
}

hsize_t product(const std::vector<hsize_t>& dims, std::size_t from) {
  hsize_t p = 1;
  for (std::size_t i = from; i < dims.size(); ++i) p *= dims[i];
  return p;
}

}  // namespace

void Handle::reset() noexcept {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    default:
      break;
  }
  id_ = H5I_INVALID_HID;
}

template <>
hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t native_type<std::int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
hid_t native_type<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t native_type<std::uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
hid_t native_type<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
hid_t native_type<std::uint8_t>() {
  return H5T_NATIVE_UINT8;
}

std::string Location::describe(const std::string& child) const {
  return file_name_ + ":" + join(path_, child);
}

bool Location::exists(const std::string& relative_path) const {
  // Walk the path component by component: H5Lexists fails on a missing intermediate group.
  std::string prefix;
  std::size_t start = 0;
  while (start <= relative_path.size()) {
    const std::size_t slash = relative_path.find('/', start);
    const std::string part = relative_path.substr(start, slash - start);
    if (!part.empty()) {
      prefix += (prefix.empty() ? "" : "/") + part;
      if (H5Lexists(id(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

Location Location::group(const std::string& relative_path) const {
  if (!exists(relative_path)) throw InputError(describe(relative_path) + ": group not found");
  Handle h(H5Gopen2(id(), relative_path.c_str(), H5P_DEFAULT));
  if (!h.valid()) throw InputError(describe(relative_path) + ": not an HDF5 group");
  return Location(std::move(h), file_name_, join(path_, relative_path));
}

Location Location::create_group(const std::string& relative_path) const {
  if (exists(relative_path)) return group(relative_path);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl.id(), 0);  // no timestamps: same data, same bytes
  Handle h(H5Gcreate2(id(), relative_path.c_str(), lcpl.id(), gcpl.id(), H5P_DEFAULT));
  if (!h.valid()) throw InputError(describe(relative_path) + ": cannot create group");
  return Location(std::move(h), file_name_, join(path_, relative_path));
}

void Location::remove(const std::string& relative_path) const {
  if (!exists(relative_path) || H5Ldelete(id(), relative_path.c_str(), H5P_DEFAULT) < 0)
    throw InputError(describe(relative_path) + ": cannot remove (not found?)");
}

Location Location::create_group_ordered(const std::string& relative_path) const {
  if (exists(relative_path)) throw InputError(describe(relative_path) + ": group exists already");
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_attr_creation_order(gcpl.id(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Handle h(H5Gcreate2(id(), relative_path.c_str(), lcpl.id(), gcpl.id(), H5P_DEFAULT));
  if (!h.valid()) throw InputError(describe(relative_path) + ": cannot create group");
  return Location(std::move(h), file_name_, join(path_, relative_path));
}

Handle Location::open_object(const std::string& object) const {
  if (object.empty()) {
    H5Iinc_ref(id());
    return Handle(id());
  }
  if (!exists(object)) throw InputError(describe(object) + ": not found");
  Handle h(H5Oopen(id(), object.c_str(), H5P_DEFAULT));
  if (!h.valid()) throw InputError(describe(object) + ": cannot open");
  return h;
}

Handle Location::open_dataset(const std::string& dataset) const {
  if (!exists(dataset)) throw InputError(describe(dataset) + ": dataset not found");
  Handle h(H5Dopen2(id(), dataset.c_str(), H5P_DEFAULT));
  if (!h.valid()) throw InputError(describe(dataset) + ": not a dataset");
  return h;
}

std::vector<hsize_t> Location::shape(const std::string& dataset) const {
  Handle d = open_dataset(dataset);
  Handle space(H5Dget_space(d.id()));
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) throw InputError(describe(dataset) + ": cannot read its shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return dims;
}

template <class T>
std::vector<T> Location::read(const std::string& dataset) const {
  const auto dims = shape(dataset);
  const hsize_t rows = dims.empty() ? 1 : dims[0];
  return read_rows<T>(dataset, 0, rows);
}

template <class T>
std::vector<T> Location::read_rows(const std::string& dataset, hsize_t row_begin, hsize_t row_end,
                                   std::optional<hsize_t> components) const {
  const auto dims = shape(dataset);
  std::vector<T> out((row_end - row_begin) * product(dims, 1));
  read_rows_into<T>(dataset, row_begin, row_end, out.data(), components);
  return out;
}

template <class T>
void Location::read_rows_into(const std::string& dataset, hsize_t row_begin, hsize_t row_end,
                              T* out, std::optional<hsize_t> components) const {
  Handle d = open_dataset(dataset);
  Handle file_space(H5Dget_space(d.id()));
  const int rank = H5Sget_simple_extent_ndims(file_space.id());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(file_space.id(), dims.data(), nullptr);
  const hsize_t per_row = product(dims, 1);
  if (components && per_row != *components)
    throw InputError(describe(dataset) + ": expected " + std::to_string(*components) +
                     " component(s) per row, the dataset has " + std::to_string(per_row));
  if (rank == 0) {  // a scalar dataset
    if (row_begin != 0 || row_end != 1)
      throw InputError(describe(dataset) + ": scalar dataset read as rows");
    if (H5Dread(d.id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
      throw InputError(describe(dataset) + ": read failed");
    return;
  }
  if (row_begin > row_end || row_end > dims[0])
    throw InputError(describe(dataset) + ": rows [" + std::to_string(row_begin) + ", " +
                     std::to_string(row_end) + ") outside its " + std::to_string(dims[0]) +
                     " rows");
  if (row_end == row_begin) return;
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = row_begin;
  count[0] = row_end - row_begin;
  H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                      nullptr);
  Handle mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  if (H5Dread(d.id(), native_type<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, out) < 0)
    throw InputError(describe(dataset) + ": read failed (not convertible to the expected type?)");
}

template <class T>
void Location::write(const std::string& dataset, const std::vector<T>& data,
                     const std::vector<hsize_t>& shape, bool compress) const {
  if (product(shape, 0) != data.size())
    throw std::invalid_argument(describe(dataset) + ": data size does not match the shape");
  if (exists(dataset)) H5Ldelete(id(), dataset.c_str(), H5P_DEFAULT);
  Handle space(shape.empty()
                   ? H5Screate(H5S_SCALAR)
                   : H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.id(), 0);  // no timestamps: same data, same bytes
  if (compress && !shape.empty() && product(shape, 0) > 0) {
    std::vector<hsize_t> chunk = shape;
    chunk[0] = std::max<hsize_t>(
        1, std::min<hsize_t>(shape[0], (1 << 20) / std::max<hsize_t>(1, product(shape, 1))));
    H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl.id(), 4);
  }
  Handle d(H5Dcreate2(id(), dataset.c_str(), native_type<T>(), space.id(), lcpl.id(), dcpl.id(),
                      H5P_DEFAULT));
  if (!d.valid())
    throw InputError(describe(dataset) + ": cannot create dataset" + failure_reason());
  if (!data.empty() &&
      H5Dwrite(d.id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0)
    throw InputError(describe(dataset) + ": write failed" + failure_reason());
}

template <class T>
void Location::create(const std::string& dataset, const std::vector<hsize_t>& shape,
                      bool chunked) const {
  if (exists(dataset)) H5Ldelete(id(), dataset.c_str(), H5P_DEFAULT);
  Handle space(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.id(), 0);  // no timestamps: same data, same bytes
  if (chunked && product(shape, 0) > 0) {
    std::vector<hsize_t> chunk = shape;
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(shape[0], 65536));
    H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data());
  }
  Handle d(H5Dcreate2(id(), dataset.c_str(), native_type<T>(), space.id(), lcpl.id(), dcpl.id(),
                      H5P_DEFAULT));
  if (!d.valid())
    throw InputError(describe(dataset) + ": cannot create dataset" + failure_reason());
}

template <class T>
void Location::write_rows(const std::string& dataset, hsize_t row_begin, const T* data,
                          hsize_t rows) const {
  if (rows == 0) return;
  Handle d = open_dataset(dataset);
  Handle file_space(H5Dget_space(d.id()));
  const int rank = H5Sget_simple_extent_ndims(file_space.id());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(file_space.id(), dims.data(), nullptr);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = row_begin;
  count[0] = rows;
  if (row_begin + rows > dims[0])
    throw InputError(describe(dataset) + ": write past its " + std::to_string(dims[0]) + " rows");
  H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                      nullptr);
  Handle mem_space(H5Screate_simple(rank, count.data(), nullptr));
  if (H5Dwrite(d.id(), native_type<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, data) < 0)
    throw InputError(describe(dataset) + ": write failed" + failure_reason());
}

std::string Location::read_string(const std::string& dataset) const {
  Handle d = open_dataset(dataset);
  Handle type(H5Dget_type(d.id()));
  Handle space(H5Dget_space(d.id()));
  if (H5Tget_class(type.id()) != H5T_STRING)
    throw InputError(describe(dataset) + ": expected a string dataset");
  if (H5Sget_simple_extent_npoints(space.id()) != 1)
    throw InputError(describe(dataset) + ": expected a single string");
  if (H5Tis_variable_str(type.id()) > 0) {
    char* value = nullptr;
    Handle mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.id(), H5T_VARIABLE);
    H5Tset_cset(mem.id(), H5Tget_cset(type.id()));  // h5py writes UTF-8: no ASCII conversion
    if (H5Dread(d.id(), mem.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
      throw InputError(describe(dataset) + ": cannot read the string");
    std::string out = value ? value : "";
    H5free_memory(value);
    return out;
  }
  std::string out(H5Tget_size(type.id()), '\0');
  if (H5Dread(d.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw InputError(describe(dataset) + ": cannot read the string");
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

void Location::write_string(const std::string& dataset, const std::string& value) const {
  if (exists(dataset)) H5Ldelete(id(), dataset.c_str(), H5P_DEFAULT);
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.id(), std::max<std::size_t>(1, value.size()));
  H5Tset_strpad(type.id(), H5T_STR_NULLPAD);
  Handle space(H5Screate(H5S_SCALAR));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle d(H5Dcreate2(id(), dataset.c_str(), type.id(), space.id(), lcpl.id(), H5P_DEFAULT,
                      H5P_DEFAULT));
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (!d.valid() || H5Dwrite(d.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) < 0)
    throw InputError(describe(dataset) + ": cannot write the string");
}

bool Location::has_attribute(const std::string& name, const std::string& object) const {
  if (!object.empty() && !exists(object)) return false;
  return H5Aexists_by_name(id(), object.empty() ? "." : object.c_str(), name.c_str(), H5P_DEFAULT) >
         0;
}

std::vector<std::string> Location::member_names() const {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  hsize_t index = 0;
  if (H5Literate(handle_.id(), H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names) < 0)
    throw InputError(describe("") + ": cannot list its members");
  return names;
}

std::vector<std::string> Location::attribute_names(const std::string& object) const {
  Handle obj = open_object(object);
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  hsize_t index = 0;
  if (H5Aiterate2(obj.id(), H5_INDEX_CRT_ORDER, H5_ITER_INC, &index, collect, &names) < 0) {
    names.clear();  // creation order not tracked on this object
    index = 0;
    if (H5Aiterate2(obj.id(), H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names) < 0)
      throw InputError(describe(object) + ": cannot list its attributes");
  }
  return names;
}

namespace {
Handle open_attribute(const Location& loc, const std::string& name, const std::string& object) {
  if (!loc.has_attribute(name, object))
    throw InputError(loc.describe(object) + ": attribute \"" + name + "\" not found");
  return Handle(H5Aopen_by_name(loc.id(), object.empty() ? "." : object.c_str(), name.c_str(),
                                H5P_DEFAULT, H5P_DEFAULT));
}
}  // namespace

template <class T>
std::vector<T> Location::attribute_array(const std::string& name, const std::string& object) const {
  Handle a = open_attribute(*this, name, object);
  Handle space(H5Aget_space(a.id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  std::vector<T> out(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  Handle type(H5Aget_type(a.id()));
  if (H5Tget_class(type.id()) == H5T_STRING ||
      (!out.empty() && H5Aread(a.id(), native_type<T>(), out.data()) < 0))
    throw InputError(describe(object) + ": attribute \"" + name + "\" is not numeric");
  return out;
}

template <class T>
T Location::attribute(const std::string& name, const std::string& object) const {
  const auto values = attribute_array<T>(name, object);
  if (values.size() != 1)
    throw InputError(describe(object) + ": attribute \"" + name +
                     "\" should be a single value, has " + std::to_string(values.size()));
  return values[0];
}

std::string Location::string_attribute(const std::string& name, const std::string& object) const {
  Handle a = open_attribute(*this, name, object);
  Handle type(H5Aget_type(a.id()));
  if (H5Tget_class(type.id()) != H5T_STRING)
    throw InputError(describe(object) + ": attribute \"" + name + "\" is not a string");
  if (H5Tis_variable_str(type.id()) > 0) {
    char* value = nullptr;
    Handle mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.id(), H5T_VARIABLE);
    H5Tset_cset(mem.id(), H5Tget_cset(type.id()));  // h5py writes UTF-8: no ASCII conversion
    if (H5Aread(a.id(), mem.id(), &value) < 0)
      throw InputError(describe(object) + ": cannot read attribute \"" + name + "\"");
    std::string out = value ? value : "";
    H5free_memory(value);
    return out;
  }
  const std::size_t size = H5Tget_size(type.id());
  std::string out(size, '\0');
  if (H5Aread(a.id(), type.id(), out.data()) < 0)
    throw InputError(describe(object) + ": cannot read attribute \"" + name + "\"");
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

template <class T>
void Location::set_attribute_array(const std::string& name, const std::vector<T>& values,
                                   const std::string& object) const {
  Handle obj = open_object(object);
  if (H5Aexists(obj.id(), name.c_str()) > 0) H5Adelete(obj.id(), name.c_str());
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle a(
      H5Acreate2(obj.id(), name.c_str(), native_type<T>(), space.id(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.id(), native_type<T>(), values.data()) < 0)
    throw InputError(describe(object) + ": cannot write attribute \"" + name + "\"");
}

template <class T>
void Location::set_attribute(const std::string& name, const T& value,
                             const std::string& object) const {
  Handle obj = open_object(object);
  if (H5Aexists(obj.id(), name.c_str()) > 0) H5Adelete(obj.id(), name.c_str());
  Handle space(H5Screate(H5S_SCALAR));
  Handle a(
      H5Acreate2(obj.id(), name.c_str(), native_type<T>(), space.id(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.id(), native_type<T>(), &value) < 0)
    throw InputError(describe(object) + ": cannot write attribute \"" + name + "\"");
}

void Location::set_string_attribute(const std::string& name, const std::string& value,
                                    const std::string& object) const {
  Handle obj = open_object(object);
  if (H5Aexists(obj.id(), name.c_str()) > 0) H5Adelete(obj.id(), name.c_str());
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.id(), std::max<std::size_t>(1, value.size()));
  H5Tset_strpad(type.id(), H5T_STR_NULLPAD);
  Handle space(H5Screate(H5S_SCALAR));
  Handle a(H5Acreate2(obj.id(), name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (!a.valid() || H5Awrite(a.id(), type.id(), padded.data()) < 0)
    throw InputError(describe(object) + ": cannot write attribute \"" + name + "\"");
}

std::string failure_reason() {
  int system_error = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_errno, &system_error);
  return system_error > 0 ? " (" + std::string(std::strerror(system_error)) + ")" : "";
}

void File::close() {
  if (!handle_.valid()) return;
  // Taken from the Handle first: a failed H5Fclose is not retried by its destructor.
  const hid_t id = handle_.release();
  const bool flushed = H5Fflush(id, H5F_SCOPE_LOCAL) >= 0;
  std::string reason = flushed ? "" : failure_reason();
  const bool closed = H5Fclose(id) >= 0;
  if (!closed && reason.empty()) reason = failure_reason();
  if (!flushed || !closed)
    throw InputError(file_name_ + ": cannot finish writing the HDF5 file" + reason);
}

File::File(const std::string& name, Mode mode) : Location(Handle(), name, "/") {
  silence_hdf5_errors();
  hid_t id = H5I_INVALID_HID;
  if (mode == Mode::truncate) {
    id = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (id < 0) throw InputError(name + ": cannot create HDF5 file" + failure_reason());
  } else {
    id = H5Fopen(name.c_str(), mode == Mode::read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
    if (id < 0)
      throw InputError(name + ": cannot open HDF5 file (missing, unreadable or not HDF5)");
  }
  handle_ = Handle(id);
}

#define IFUSIM_H5_INSTANTIATE(T)                                                                  \
  template std::vector<T> Location::read<T>(const std::string&) const;                            \
  template std::vector<T> Location::read_rows<T>(const std::string&, hsize_t, hsize_t,            \
                                                 std::optional<hsize_t>) const;                   \
  template void Location::read_rows_into<T>(const std::string&, hsize_t, hsize_t, T*,             \
                                            std::optional<hsize_t>) const;                        \
  template void Location::write<T>(const std::string&, const std::vector<T>&,                     \
                                   const std::vector<hsize_t>&, bool) const;                      \
  template void Location::create<T>(const std::string&, const std::vector<hsize_t>&, bool) const; \
  template void Location::write_rows<T>(const std::string&, hsize_t, const T*, hsize_t) const;    \
  template T Location::attribute<T>(const std::string&, const std::string&) const;                \
  template std::vector<T> Location::attribute_array<T>(const std::string&, const std::string&)    \
      const;                                                                                      \
  template void Location::set_attribute<T>(const std::string&, const T&, const std::string&)      \
      const;                                                                                      \
  template void Location::set_attribute_array<T>(const std::string&, const std::vector<T>&,       \
                                                 const std::string&) const;

IFUSIM_H5_INSTANTIATE(float)
IFUSIM_H5_INSTANTIATE(double)
IFUSIM_H5_INSTANTIATE(std::int32_t)
IFUSIM_H5_INSTANTIATE(std::int64_t)
IFUSIM_H5_INSTANTIATE(std::uint32_t)
IFUSIM_H5_INSTANTIATE(std::uint64_t)
IFUSIM_H5_INSTANTIATE(std::uint8_t)
#undef IFUSIM_H5_INSTANTIATE

}  // namespace ifusim::h5
