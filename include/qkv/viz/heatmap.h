// Heatmaps of attention weights as PNG images (tutorial §6.1).
//
// The C++ counterpart of the tutorial's
//   plt.imshow(attn, cmap="Blues"); plt.colorbar(); plt.title(...)
//   plt.xticks(range(S), key_tokens, rotation=90); plt.yticks(range(L), query_tokens)
// without a plotting library: each matrix cell becomes a square of
// `cell_pixels` pixels, coloured from near-white (low) to dark blue (high),
// with thin grey grid lines between cells; around it, when asked for, a title,
// one label per row (left) and per column (below, turned 90° when wider than a
// cell), axis names, and a colour bar with its values. Text is drawn with the
// built-in 5 x 7 font (bitmap_font.h): printable ASCII, anything else as '?'.
//
//   viz::HeatmapOptions o;
//   o.title = "layer 0, head 1";
//   o.row_labels = o.col_labels = {"Zhang", "San", "works", "in", "Hangzhou"};
//   viz::write_heatmap_png("attn.png", weights.select(0, 0).select(0, 1), o);
//
// Row i of the matrix is drawn as the i-th band from the top and column j as
// the j-th band from the left, as imshow does: for attention weights, a row is
// one query and its cells are the keys it looks at.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/tensor.h"
#include "qkv/viz/image.h"

namespace qkv::viz {

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
  // Values written beside the colour bar: this many, evenly spaced from vmin
  // (bottom) to vmax (top); fewer (at least the two ends) when the bar is too
  // short for their lines not to touch. 0 for none, else 2..11.
  int colorbar_ticks = 5;

  // Text; an empty string or list is not drawn and takes no room.
  std::string title;                    // above the map: layer, head, input
  std::vector<std::string> row_labels;  // one per row, e.g. the query tokens
  std::vector<std::string> col_labels;  // one per column, e.g. the key tokens
  std::string row_axis_label;           // e.g. "query", turned 90°, left of the row labels
  std::string col_axis_label;           // e.g. "key", below the column labels
  // Labels longer than this are cut to max_label_chars - 2 characters and "..", 3..64.
  int max_label_chars = 12;
  // Size of a font pixel, 1..8; 0 picks 2 when cell_pixels >= 32, else 1.
  int text_scale = 0;
};

// The rendered heatmap and where each part went (an empty Box for a part not drawn).
struct HeatmapImage : RgbImage {
  // The value range the colours stand for (resolved when auto_range is set).
  double vmin = 0.0;
  double vmax = 1.0;
  Box cells;            // the cells with their grid lines
  Box colorbar;         // the colour bar with its frame
  Box colorbar_labels;  // tick marks and values right of the bar
  Box title;
  Box row_labels;
  Box col_labels;
  Box row_axis_label;
  Box col_axis_label;
};

// Draws the heatmap. Errors name the problem: undefined, not 2-D or empty
// matrix, a NaN (with its index), label counts that do not match the matrix,
// options out of range, an image too large. ±inf is allowed and clamped to the
// ends of the range.
// matrix: [rows, cols], any dtype (bool draws as 0/1)
HeatmapImage render_heatmap(const Tensor& matrix, const HeatmapOptions& options = {});

// render_heatmap + write_png.
// matrix: [rows, cols]
void write_heatmap_png(const std::filesystem::path& path, const Tensor& matrix,
                       const HeatmapOptions& options = {});

}  // namespace qkv::viz
