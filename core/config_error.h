#pragma once
#include <stdexcept>
#include <string>

namespace ifusim {

// A bad configuration value: the message names the key's path and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad input file: the message names the file, the dataset or attribute, and what was expected.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ifusim
