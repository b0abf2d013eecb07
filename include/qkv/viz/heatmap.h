// Heatmaps of attention weights as PNG images (tutorial §6.1).
//
// The C++ counterpart of the tutorial's
//   plt.imshow(attn_matrix, cmap="Blues"); plt.colorbar()
// without a plotting library: each matrix cell becomes a square of
// `cell_pixels` pixels, coloured from near-white (low) to dark blue (high),
// with thin grey grid lines between cells and a colour bar on the right
// (high at the top, low at the bottom). There are no text labels: qkv has no
// font renderer, so print the range next to the file name if it matters.
//
//   viz::write_heatmap_png("attn.png", weights.select(0, 0).select(0, 0));
//
// Row i of the matrix is drawn as the i-th band from the top and column j as
// the j-th band from the left, as imshow does: for attention weights, a row is
// one query and its cells are the keys it looks at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::viz {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// The "Blues" colour map (ColorBrewer's nine blues, which matplotlib's Blues
// interpolates): t = 0 is near-white (247, 251, 255), t = 1 dark blue
// (8, 48, 107). t is clamped to [0, 1]; NaN counts as 0.
Rgb blues_color(double t);

struct HeatmapOptions {
  // Side in pixels of the square drawn for one matrix cell, 1..512.
  int cell_pixels = 32;
  // Width in pixels of the grid lines around and between cells, 0..cell_pixels (0: no grid).
  int grid_pixels = 1;
  // Colour range: values <= vmin are drawn lightest, values >= vmax darkest.
  // [0, 1] suits attention weights, which are probabilities.
  double vmin = 0.0;
  double vmax = 1.0;
  // Take the range from the matrix's finite minimum and maximum instead (as
  // plt.imshow does by default). A constant matrix gets [value - 0.5, value + 0.5].
  bool auto_range = false;
  // A vertical colour bar strip on the right of the cells.
  bool colorbar = true;
};

// An 8-bit RGB image in memory, rows top to bottom.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3 bytes, row-major, R G B
  // The value range the colours stand for (resolved when auto_range is set).
  double vmin = 0.0;
  double vmax = 1.0;

  Rgb at(int64_t x, int64_t y) const;
};

// Draws the heatmap. Errors name the problem: undefined, not 2-D or empty
// matrix, a NaN (with its index), options out of range, an image too large.
// ±inf is allowed and clamped to the ends of the range.
// matrix: [rows, cols], any dtype (bool draws as 0/1)
RgbImage render_heatmap(const Tensor& matrix, const HeatmapOptions& options = {});

// Encodes an image as an 8-bit RGB PNG file's bytes (libpng).
std::vector<std::byte> encode_png(const RgbImage& image);

// Writes `image` as a PNG file, atomically (io::write_file_atomically): a
// reader sees the old file or the complete new one, never half of it. Throws
// qkv::Error (ErrorKind::kIO) naming the path when it cannot be written.
void write_png(const std::filesystem::path& path, const RgbImage& image);

// render_heatmap + write_png.
// matrix: [rows, cols]
void write_heatmap_png(const std::filesystem::path& path, const Tensor& matrix,
                       const HeatmapOptions& options = {});

}  // namespace qkv::viz
