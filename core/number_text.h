#pragma once
// A number for a message, a label or a catalog field: printf's %g to `significant` digits
// (trailing zeros dropped, exponent form for very large or small values).
#include <cstdio>
#include <string>

namespace ifusim {

inline std::string number_text(double value, int significant = 6) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g", significant, value);
  return text;
}

}  // namespace ifusim
