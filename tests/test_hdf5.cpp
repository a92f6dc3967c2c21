#include <catch2/catch.hpp>

#include <filesystem>

#include "io/hdf5.h"

using namespace ifusim;

TEST_CASE("hdf5 wrapper: datasets, hyperslabs, attributes and clear errors", "[io][hdf5]") {
  const auto path = (std::filesystem::temp_directory_path() / "ifusim_test_hdf5.h5").string();
  {
    h5::File f(path, h5::File::Mode::truncate);
    f.write<float>("PartType4/Coordinates", {1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
    f.set_attribute<double>("a_scaling", 1.0, "PartType4/Coordinates");
    f.create_group("Header").set_attribute_array<std::int64_t>("NumPart_ThisFile",
                                                               {0, 0, 0, 0, 7, 0});
    f.set_string_attribute("unit", "kpc", "PartType4/Coordinates");
    f.create<double>("big", {10, 2});
    const std::vector<double> rows = {1, 2, 3, 4};
    f.write_rows<double>("big", 4, rows.data(), 2);
  }
  h5::File f(path);
  CHECK(f.shape("PartType4/Coordinates") == std::vector<hsize_t>{3, 3});
  CHECK(f.read_rows<double>("PartType4/Coordinates", 1, 3, 3) ==
        std::vector<double>{4, 5, 6, 7, 8, 9});
  CHECK(f.attribute<double>("a_scaling", "PartType4/Coordinates") == 1.0);
  CHECK(f.group("Header").attribute_array<std::int64_t>("NumPart_ThisFile")[4] == 7);
  CHECK(f.string_attribute("unit", "PartType4/Coordinates") == "kpc");
  CHECK(f.read<double>("big")[11] == 4.0);  // row 5, column 1
  CHECK_FALSE(f.exists("PartType0/Masses"));
  CHECK_THROWS_WITH(f.read<float>("PartType0/Masses"),
                    Catch::Contains("ifusim_test_hdf5.h5:/PartType0/Masses: dataset not found"));
  CHECK_THROWS_WITH(f.read_rows<float>("PartType4/Coordinates", 0, 2, 1),
                    Catch::Contains("expected 1 component(s) per row, the dataset has 3"));
  CHECK_THROWS_WITH(h5::File("/nonexistent/x.hdf5"),
                    Catch::Contains("/nonexistent/x.hdf5: cannot open HDF5 file"));
  std::filesystem::remove(path);
}
