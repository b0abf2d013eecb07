// Heatmap PNGs: layout, colours, PNG round trip through libpng, and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "qkv/tensor.h"
#include "qkv/viz/heatmap.h"
#include "png_reading.h"
#include "test_util.h"

namespace qkv::viz {
namespace {

using qkv_test::expect_error;
using qkv_test::read_png;

namespace fs = std::filesystem;

constexpr Rgb kLightest = {247, 251, 255};
constexpr Rgb kDarkest = {8, 48, 107};
constexpr Rgb kGrid = {200, 200, 200};

[[maybe_unused]] std::ostream& operator<<(std::ostream& out, const Rgb& c) {
  return out << "(" << int(c.r) << ", " << int(c.g) << ", " << int(c.b) << ")";
}

Tensor matrix(const Shape& shape, std::vector<float> values) {
  return Tensor::from_vector(shape, std::span<const float>(values));
}

// Centre pixel of cell (row, col) for the given options.
Rgb cell_color(const HeatmapImage& image, const HeatmapOptions& o, int64_t row, int64_t col) {
  const int64_t step = o.cell_pixels + o.grid_pixels;
  return image.at(image.cells.x + o.grid_pixels + col * step + o.cell_pixels / 2,
                  image.cells.y + o.grid_pixels + row * step + o.cell_pixels / 2);
}

class HeatmapFiles : public qkv_test::TempDirTest {};

TEST(BluesColor, EndsAndMonotonicDarkening) {
  EXPECT_EQ(blues_color(0.0), kLightest);
  EXPECT_EQ(blues_color(1.0), kDarkest);
  EXPECT_EQ(blues_color(-3.0), kLightest);
  EXPECT_EQ(blues_color(7.0), kDarkest);
  EXPECT_EQ(blues_color(std::nan("")), kLightest);
  // ColorBrewer's middle blue sits exactly at t = 0.5.
  EXPECT_EQ(blues_color(0.5), (Rgb{107, 174, 214}));
  int previous = 3 * 255 + 1;
  for (int i = 0; i <= 100; ++i) {
    const Rgb c = blues_color(i / 100.0);
    const int brightness = c.r + c.g + c.b;
    EXPECT_LT(brightness, previous) << "t = " << i / 100.0;
    EXPECT_GE(c.b, c.r);  // always a blue
    previous = brightness;
  }
}

TEST(RenderHeatmap, LayoutCellsGridAndColorBar) {
  HeatmapOptions o;
  o.cell_pixels = 10;
  o.grid_pixels = 1;
  o.colorbar_ticks = 0;  // no text: the cells start at (0, 0)
  const HeatmapImage image =
      render_heatmap(matrix({2, 3}, {0.0f, 0.5f, 1.0f, 0.25f, 0.75f, 2.0f}), o);
  // 3 cells and 4 lines across, then a gap of 5, a 1-pixel frame, an 8-pixel bar, a frame.
  EXPECT_EQ(image.width, 3 * 10 + 4 * 1 + 5 + 1 + 8 + 1);
  EXPECT_EQ(image.height, 2 * 10 + 3 * 1);
  EXPECT_EQ(image.pixels.size(), static_cast<size_t>(image.width * image.height * 3));
  EXPECT_EQ(image.vmin, 0.0);
  EXPECT_EQ(image.vmax, 1.0);

  EXPECT_EQ(cell_color(image, o, 0, 0), kLightest);
  EXPECT_EQ(cell_color(image, o, 0, 1), blues_color(0.5));
  EXPECT_EQ(cell_color(image, o, 0, 2), kDarkest);
  EXPECT_EQ(cell_color(image, o, 1, 0), blues_color(0.25));
  EXPECT_EQ(cell_color(image, o, 1, 2), kDarkest);  // 2.0 clamps to the top of [0, 1]
  // Whole cell is one colour, corners included.
  EXPECT_EQ(image.at(1, 1), kLightest);
  EXPECT_EQ(image.at(10, 10), kLightest);
  // Grid lines: the border and the line between cells.
  EXPECT_EQ(image.at(0, 0), kGrid);
  EXPECT_EQ(image.at(11, 5), kGrid);
  EXPECT_EQ(image.at(5, 11), kGrid);
  EXPECT_EQ(image.at(34 - 1, 22), kGrid);
  // Gap between the cells and the colour bar stays white.
  EXPECT_EQ(image.at(36, 10), qkv_test::kWhite);
  // Colour bar: darkest at the top of its strip, lightest at the bottom.
  const int64_t bar_x = 34 + 5 + 1 + 4;
  EXPECT_EQ(image.at(bar_x, 1), kDarkest);
  EXPECT_EQ(image.at(bar_x, image.height - 2), kLightest);
  EXPECT_EQ(image.at(bar_x, 0), kGrid);
  EXPECT_EQ(image.at(image.width - 1, 10), kGrid);
}

TEST(RenderHeatmap, NoGridNoColorBar) {
  HeatmapOptions o;
  o.cell_pixels = 3;
  o.grid_pixels = 0;
  o.colorbar = false;
  const HeatmapImage image = render_heatmap(matrix({2, 2}, {1, 0, 0, 1}), o);
  EXPECT_EQ(image.width, 6);
  EXPECT_EQ(image.height, 6);
  EXPECT_EQ(image.at(0, 0), kDarkest);
  EXPECT_EQ(image.at(2, 2), kDarkest);
  EXPECT_EQ(image.at(3, 0), kLightest);
  EXPECT_EQ(image.at(5, 5), kDarkest);
}

TEST(RenderHeatmap, AutoRangeUsesFiniteMinAndMax) {
  HeatmapOptions o;
  o.auto_range = true;
  const float inf = std::numeric_limits<float>::infinity();
  const HeatmapImage image = render_heatmap(matrix({1, 4}, {2.0f, 3.0f, 4.0f, -inf}), o);
  EXPECT_EQ(image.vmin, 2.0);
  EXPECT_EQ(image.vmax, 4.0);
  EXPECT_EQ(cell_color(image, o, 0, 0), kLightest);
  EXPECT_EQ(cell_color(image, o, 0, 1), blues_color(0.5));
  EXPECT_EQ(cell_color(image, o, 0, 2), kDarkest);
  EXPECT_EQ(cell_color(image, o, 0, 3), kLightest);  // -inf clamps to the bottom

  const HeatmapImage flat = render_heatmap(matrix({2, 2}, {0.25f, 0.25f, 0.25f, 0.25f}), o);
  EXPECT_EQ(flat.vmin, -0.25);
  EXPECT_EQ(flat.vmax, 0.75);
  EXPECT_EQ(cell_color(flat, o, 1, 1), blues_color(0.5));
}

TEST(RenderHeatmap, ViewsFloat64AndBool) {
  HeatmapOptions o;
  o.cell_pixels = 4;
  // A transposed (non-contiguous) view: cell (0, 1) is the source's (1, 0).
  const Tensor source = matrix({2, 2}, {0.0f, 0.0f, 1.0f, 0.0f});
  const HeatmapImage t = render_heatmap(source.transpose(0, 1), o);
  EXPECT_EQ(cell_color(t, o, 0, 1), kDarkest);
  EXPECT_EQ(cell_color(t, o, 1, 0), kLightest);

  std::vector<double> values = {0.0, 1.0};
  const HeatmapImage d =
      render_heatmap(Tensor::from_vector({1, 2}, std::span<const double>(values)), o);
  EXPECT_EQ(cell_color(d, o, 0, 1), kDarkest);

  const HeatmapImage b = render_heatmap(Tensor::from_bools({1, 2}, {true, false}), o);
  EXPECT_EQ(cell_color(b, o, 0, 0), kDarkest);
  EXPECT_EQ(cell_color(b, o, 0, 1), kLightest);
}

TEST(RenderHeatmap, RejectsBadMatrices) {
  expect_error([] { render_heatmap(Tensor()); }, ErrorKind::kValue, {"undefined"});
  expect_error([] { render_heatmap(Tensor::zeros({4})); }, ErrorKind::kValue, {"2-D", "[4]"});
  expect_error(
      [] {
        render_heatmap(Tensor::zeros({2, 4, 4}));
      },
      ErrorKind::kValue, {"2-D", "[2, 4, 4]", "select"});
  expect_error(
      [] {
        render_heatmap(Tensor::zeros({0, 3}));
      },
      ErrorKind::kValue, {"empty", "[0, 3]"});
  expect_error(
      [] {
        render_heatmap(matrix({2, 3}, {0, 0, 0, 0, 0, std::nanf("")}));
      },
      ErrorKind::kValue, {"NaN at [1, 2]"});
  HeatmapOptions o;
  o.auto_range = true;
  const float inf = std::numeric_limits<float>::infinity();
  expect_error(
      [&] {
        render_heatmap(matrix({1, 2}, {inf, -inf}), o);
      },
      ErrorKind::kValue, {"finite"});
}

TEST(RenderHeatmap, RejectsBadOptions) {
  const Tensor m = Tensor::zeros({2, 2});
  HeatmapOptions o;
  o.cell_pixels = 0;
  expect_error([&] { render_heatmap(m, o); }, ErrorKind::kValue, {"cell_pixels", "got 0"});
  o = {};
  o.grid_pixels = 40;
  expect_error([&] { render_heatmap(m, o); }, ErrorKind::kValue, {"grid_pixels", "got 40"});
  o = {};
  o.vmin = 1.0;
  o.vmax = 1.0;
  expect_error([&] { render_heatmap(m, o); }, ErrorKind::kValue, {"vmin", "vmax"});
  o = {};
  o.vmax = std::nan("");
  expect_error([&] { render_heatmap(m, o); }, ErrorKind::kValue, {"vmax"});
  // Refused before any pixel memory is allocated.
  o = {};
  o.cell_pixels = 512;
  expect_error(
      [&] {
        render_heatmap(Tensor::zeros({1000, 1000}), o);
      },
      ErrorKind::kValue, {"[1000, 1000]", "lower cell_pixels"});
}

TEST_F(HeatmapFiles, WritesAPngThatLibpngReadsBack) {
  HeatmapOptions o;
  o.cell_pixels = 16;
  const Tensor weights = matrix({3, 3}, {1.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.0f, 0.2f, 0.3f, 0.5f});
  const fs::path path = dir_ / "attn.png";
  write_heatmap_png(path, weights, o);

  const HeatmapImage expected = render_heatmap(weights, o);
  const RgbImage png = read_png(path);
  ASSERT_EQ(png.width, expected.width);
  ASSERT_EQ(png.height, expected.height);
  EXPECT_EQ(png.pixels, expected.pixels);
  // The largest value is the darkest cell, the smallest the lightest.
  const int64_t x = expected.cells.x, y = expected.cells.y;
  EXPECT_EQ(png.at(x + 1 + 8, y + 1 + 8), kDarkest);
  EXPECT_EQ(png.at(x + 1 + 17 + 8, y + 1 + 8), kLightest);
  EXPECT_EQ(png.at(x + 1 + 17 + 8, y + 1 + 17 + 8), blues_color(0.5));

  // Nothing but the PNG is left in the directory (the temporary file was renamed).
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "attn.png");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(HeatmapFiles, ReplacesAnExistingFile) {
  const fs::path path = dir_ / "attn.png";
  std::ofstream(path) << "old contents";
  write_heatmap_png(path, Tensor::ones({2, 2}));
  const RgbImage png = read_png(path);
  const HeatmapImage expected = render_heatmap(Tensor::ones({2, 2}));
  EXPECT_EQ(png.at(expected.cells.x + 16, expected.cells.y + 16), kDarkest);
}

TEST_F(HeatmapFiles, UnwritablePathIsAnIOError) {
  expect_error(
      [&] {
        write_heatmap_png(dir_ / "missing" / "attn.png", Tensor::ones({2, 2}));
      },
      ErrorKind::kIO, {"missing/attn.png"});
  expect_error(
      [&] {
        write_heatmap_png(dir_, Tensor::ones({2, 2}));
      },
      ErrorKind::kIO, {dir_.c_str()});
  expect_error(
      [&] {
        write_heatmap_png("", Tensor::ones({2, 2}));
      },
      ErrorKind::kValue, {"path is empty"});
  // Bad input is reported before anything is created.
  expect_error([&] { write_heatmap_png(dir_ / "bad.png", Tensor::zeros({3})); }, ErrorKind::kValue,
               {"write_heatmap_png", "2-D"});
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST(EncodePng, RejectsInconsistentImages) {
  RgbImage image;
  image.width = 2;
  image.height = 2;
  image.pixels.resize(5);
  expect_error([&] { encode_png(image); }, ErrorKind::kValue, {"12", "got 5"});
  image.width = 0;
  expect_error([&] { encode_png(image); }, ErrorKind::kValue, {"0 x 2"});
}

}  // namespace
}  // namespace qkv::viz
