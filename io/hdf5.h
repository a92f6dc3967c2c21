#pragma once
// RAII wrappers over the HDF5 C API. Every failure throws InputError naming the file, the object
// path and what was expected. Debian's libhdf5 is built thread-safe, so from_callback's
// concurrent hyperslab reads are safe (HDF5 serialises them internally).
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_error.h"

namespace ifusim::h5 {

// One HDF5 identifier, closed with the right H5?close on destruction.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() noexcept;
  // Gives the identifier up without closing it.
  hid_t release() noexcept {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Element types the wrappers read and write.
template <class T>
hid_t native_type();

class File;

// A group or the file's root: where datasets, subgroups and attributes are looked up by path.
class Location {
 public:
  const std::string& file_name() const { return file_name_; }
  const std::string& path() const { return path_; }           // "/" or "/PartType4"
  std::string describe(const std::string& child = "") const;  // "file.hdf5:/PartType4/Masses"
  hid_t id() const { return handle_.id(); }

  bool exists(const std::string& relative_path) const;
  Location group(const std::string& relative_path) const;         // must exist
  Location create_group(const std::string& relative_path) const;  // or open if it exists
  void remove(const std::string& relative_path) const;            // unlinks a dataset or group
  // A new group whose attributes keep their creation order (for attribute_names); the group must
  // not exist yet.
  Location create_group_ordered(const std::string& relative_path) const;

  // Dataset shape (dimensions), e.g. {N, 3}.
  std::vector<hsize_t> shape(const std::string& dataset) const;

  // Reads a whole dataset, or rows [row_begin, row_end) of its first dimension (a hyperslab),
  // converted to T, row-major. `components` (the product of the other dimensions) is checked
  // when given.
  template <class T>
  std::vector<T> read(const std::string& dataset) const;
  template <class T>
  std::vector<T> read_rows(const std::string& dataset, hsize_t row_begin, hsize_t row_end,
                           std::optional<hsize_t> components = std::nullopt) const;
  // Reads rows into caller-provided memory (row_end - row_begin) * components elements.
  template <class T>
  void read_rows_into(const std::string& dataset, hsize_t row_begin, hsize_t row_end, T* out,
                      std::optional<hsize_t> components = std::nullopt) const;

  // Writes (creates or replaces) a dataset of the given shape from row-major data.
  template <class T>
  void write(const std::string& dataset, const std::vector<T>& data,
             const std::vector<hsize_t>& shape, bool compress = false) const;
  // Creates an empty dataset of `shape` to be filled by write_rows (bounded memory): chunked (up
  // to 65536 rows a chunk), or contiguous (the layout write() gives without compression: a
  // reader sees the same dataset as after one write() of the whole, and a large row-by-row writer
  // holds no chunk in HDF5's cache).
  template <class T>
  void create(const std::string& dataset, const std::vector<hsize_t>& shape,
              bool chunked = true) const;
  template <class T>
  void write_rows(const std::string& dataset, hsize_t row_begin, const T* data, hsize_t rows) const;

  // A string dataset (scalar or one element; fixed or variable length, as h5py writes them).
  std::string read_string(const std::string& dataset) const;
  void write_string(const std::string& dataset, const std::string& value) const;

  // Attributes of this location (object = "") or of a child object.
  bool has_attribute(const std::string& name, const std::string& object = "") const;
  // Names of the links (groups, datasets) in this group, by name.
  std::vector<std::string> member_names() const;
  // Names of the attributes, in creation order where the object tracks it, else by name.
  std::vector<std::string> attribute_names(const std::string& object = "") const;
  template <class T>
  T attribute(const std::string& name, const std::string& object = "") const;  // scalar
  template <class T>
  std::vector<T> attribute_array(const std::string& name, const std::string& object = "") const;
  std::string string_attribute(const std::string& name, const std::string& object = "") const;
  template <class T>
  void set_attribute(const std::string& name, const T& value, const std::string& object = "") const;
  template <class T>
  void set_attribute_array(const std::string& name, const std::vector<T>& values,
                           const std::string& object = "") const;
  void set_string_attribute(const std::string& name, const std::string& value,
                            const std::string& object = "") const;

 protected:
  Location(Handle handle, std::string file_name, std::string path)
      : handle_(std::move(handle)), file_name_(std::move(file_name)), path_(std::move(path)) {}
  Handle open_object(const std::string& object) const;  // "" = this location
  Handle open_dataset(const std::string& dataset) const;
  Handle handle_;
  std::string file_name_;
  std::string path_;
  friend class File;
};

class File : public Location {
 public:
  enum class Mode { read, read_write, truncate };
  // Throws InputError("<name>: cannot open HDF5 file (...)") when it is missing or not HDF5.
  File(const std::string& name, Mode mode = Mode::read);
  // Flushes and closes the file; throws InputError naming the file and the system's reason (a
  // full disk) when what HDF5 still held in its caches cannot be written. A writer calls it
  // before it renames the file into place: the destructor closes too but cannot report.
  void close();
};

// The system's reason for the last failed HDF5 call, as " (No space left on device)", or "" when
// HDF5's error stack names none (read it before any other HDF5 call clears the stack).
std::string failure_reason();

}  // namespace ifusim::h5
