// The FITS template readers on files built from the input: a pyPipe3D grid (MaStar's format: a
// 2-D image, one SSP a row, NAMEi / NORMi keywords) or a MILES directory (one 1-D spectrum a
// file, the age and [M/H] in the file name). The input chooses the shapes, the keywords (present,
// absent, special numbers, unparsable names, repeated nodes) and values, near a valid grid.
// load_ssp_library must succeed or throw ConfigError / InputError naming the file or folder.
// A zero byte is always the valid choice; seeds: a valid pyPipe3D grid (8 pixels x 6 SSPs) and a
// valid 3 x 3 MILES directory.
#include <fitsio.h>

#include <string>
#include <vector>

#include "io/ssp/ssp_library.h"
#include "tests/fuzz/fuzz_common.h"

using namespace ifusim;

namespace {

// One keyword as the input chooses: normally `value`, else absent, a special number or a
// string where a number is expected.
void write_number_key(fitsfile* f, const char* key, double value, fuzz::Bytes& in, int* status) {
  const int choice = in.byte() % 8;
  if (choice == 1) return;  // absent
  if (choice == 2) value = in.value();
  if (choice == 3) {
    char text[] = "not a number";
    fits_update_key(f, TSTRING, key, text, nullptr, status);
    return;
  }
  fits_update_key(f, TDOUBLE, key, &value, nullptr, status);
}

void write_image(const std::string& path, std::vector<long> dims, fuzz::Bytes& in,
                 const std::vector<std::pair<std::string, std::string>>& names,
                 const std::vector<std::pair<std::string, double>>& numbers) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_create_file(&f, ("!" + path).c_str(), &status);
  fits_create_img(f, DOUBLE_IMG, static_cast<int>(dims.size()), dims.data(), &status);
  for (const auto& [key, value] : numbers) write_number_key(f, key.c_str(), value, in, &status);
  for (const auto& [key, value] : names) {
    std::string text = value;
    const int choice = in.byte() % 8;
    if (choice == 1) continue;  // absent
    if (choice == 2)
      text = "spec_ssp_" + std::to_string(in.byte()) + "_z" + std::to_string(in.byte());
    if (choice == 3) text = "garbage";
    fits_update_key(f, TSTRING, key.c_str(), text.data(), nullptr, &status);
  }
  long n = 1;
  for (long d : dims) n *= d;
  std::vector<double> data(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = 1e-5 * static_cast<double>(1 + i % 5);
  if (!data.empty() && in.byte() % 4 == 3) data[in.index(data.size())] = in.value();
  fits_write_img(f, TDOUBLE, 1, n, data.data(), &status);
  fits_close_file(f, &status);
}

void write_pypipe3d(const std::string& path, fuzz::Bytes& in) {
  // A zero byte always means the valid choice: the empty input is a valid 8 x 6 grid.
  const long n_pix = 8 - in.byte() % 8;
  const long n_rows = 6 - in.byte() % 7;
  const std::vector<std::string> ages = {"0.01", "1.5", "10"}, zs = {"0004", "019"};
  std::vector<std::pair<std::string, std::string>> names;
  std::vector<std::pair<std::string, double>> numbers = {
      {"CRVAL1", 3000.0}, {"CDELT1", 2.0}, {"CRPIX1", 1.0}, {"WAVENORM", 5000.0}};
  for (long r = 0; r < n_rows; ++r) {
    const std::size_t node = static_cast<std::size_t>(r) % (ages.size() * zs.size());
    names.emplace_back("NAME" + std::to_string(r), "spec_ssp_" + ages[node / zs.size()] + "_z" +
                                                       zs[node % zs.size()] + ".spec");
    numbers.emplace_back("NORM" + std::to_string(r), 1e-5 * static_cast<double>(r + 1));
  }
  std::vector<long> dims = {n_pix, n_rows};
  if (in.byte() % 8 == 7) dims = {n_pix};  // 1-D
  write_image(path, dims, in, names, numbers);
}

void write_miles(const std::filesystem::path& dir, fuzz::Bytes& in) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::string> ages = {"01.0000", "10.0000", "00.0300"};
  const std::vector<std::string> mhs = {"m0.25", "p0.06", "p0.40"};
  const std::size_t n_age = 3 - in.index(3), n_mh = 3 - in.index(3);
  for (std::size_t a = 0; a < n_age; ++a)
    for (std::size_t z = 0; z < n_mh; ++z) {
      if (in.byte() % 16 == 15) continue;  // a missing node
      std::string name = "Mch1.30Z" + mhs[z] + "T" + ages[a] + "_iTp0.00_baseFe.fits";
      if (in.byte() % 16 == 15) name = "Mch1.30Zq0.00T1_iTp0.00_baseFe.fits";  // unparsable
      const long n_pix = 8 + (in.byte() % 16 == 15 ? 1 : 0);
      write_image((dir / name).string(), {n_pix}, in, {},
                  {{"CRVAL1", 3540.5}, {"CDELT1", 0.9}, {"CRPIX1", 1.0}});
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  if (in.byte() % 2 == 0) {
    const std::string path = (fuzz::scratch_dir() / "templates.fits").string();
    write_pypipe3d(path, in);
    fuzz::expect_clean_errors("templates.fits", [&] { load_ssp_library(path, "auto"); });
  } else {
    const auto dir = fuzz::scratch_dir() / "miles";
    write_miles(dir, in);
    fuzz::expect_clean_errors("miles", [&] { load_ssp_library(dir.string(), "auto"); });
  }
  return 0;
}
