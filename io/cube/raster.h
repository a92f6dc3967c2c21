#pragma once
// A small RGB canvas for the quick-look PNGs: pixels, lines, rectangles and text in a built-in
// 5x7 bitmap font (printable ASCII), written with libpng.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ifusim::detail {

using Rgb = std::array<std::uint8_t, 3>;

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  void set(int x, int y, Rgb c);  // ignores points outside
  Rgb get(int x, int y) const { return pixels_[static_cast<std::size_t>(y) * width_ + x]; }
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners
  void rect(int x0, int y0, int x1, int y1, Rgb c);       // outline
  void line(int x0, int y0, int x1, int y1, Rgb c);       // Bresenham
  // Text at (x, y) = top-left, each font pixel drawn `scale` x `scale`. vertical: rotated 90
  // degrees anticlockwise (reads bottom to top), (x, y) then the bottom-left.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1, bool vertical = false);
  static int text_width(const std::string& s, int scale = 1) {
    return s.empty() ? 0 : static_cast<int>(s.size()) * 6 * scale - scale;
  }
  static int text_height(int scale = 1) { return 7 * scale; }
  // Writes an 8-bit RGB PNG to `path` (through a temporary, renamed at the end).
  void write_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<Rgb> pixels_;
};

}  // namespace ifusim::detail
