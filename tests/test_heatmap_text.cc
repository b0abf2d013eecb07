// Text in heatmaps: the 5 x 7 font, labels, title and colour bar values, read back from PNG.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/tensor.h"
#include "qkv/viz/bitmap_font.h"
#include "qkv/viz/heatmap.h"
#include "png_reading.h"
#include "test_util.h"

namespace qkv::viz {
namespace {

using qkv_test::expect_error;
using qkv_test::kWhite;
using qkv_test::read_png;
namespace fs = std::filesystem;

// Pixels of `box` that are not the white background.
int64_t ink(const RgbImage& image, const Box& box) {
  int64_t n = 0;
  for (int64_t y = box.y; y < box.y + box.height; ++y)
    for (int64_t x = box.x; x < box.x + box.width; ++x) n += image.at(x, y) != kWhite;
  return n;
}

bool overlaps(const Box& a, const Box& b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

bool inside(const Box& inner, const Box& outer) {
  return inner.x >= outer.x && inner.y >= outer.y &&
         inner.x + inner.width <= outer.x + outer.width &&
         inner.y + inner.height <= outer.y + outer.height;
}

std::vector<std::string> tokens(int64_t n) {
  const std::vector<std::string> words = {"Zhang", "San", "works", "in", "Hangzhou",
                                          ",",     "Li",  "Si",    "in", "Shanghai"};
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(words[i % words.size()]);
  return out;
}

HeatmapOptions labelled(int64_t n) {
  HeatmapOptions o;
  o.cell_pixels = 24;
  o.title = "layer 0, head 1: Zhang San works in Hangzhou";
  o.row_labels = o.col_labels = tokens(n);
  o.row_axis_label = "query";
  o.col_axis_label = "key";
  return o;
}

Tensor uniform(int64_t n) { return Tensor::full({n, n}, 1.0 / static_cast<double>(n)); }

Tensor matrix_of(std::vector<float> row) {
  return Tensor::from_vector({1, static_cast<int64_t>(row.size())}, std::span<const float>(row));
}

TEST(BitmapFont, PrintableAsciiReplacesEverythingElse) {
  EXPECT_EQ(printable_ascii("Zhang San ~!"), "Zhang San ~!");
  EXPECT_EQ(printable_ascii("Zhang \xe5\xbc\xa0\xe4\xb8\x89"), "Zhang ??");  // 张三
  EXPECT_EQ(printable_ascii("\xc4\xa0the"), "?the");                         // GPT-2's Ġ
  EXPECT_EQ(printable_ascii("\xf0\x9f\x98\x80!"), "?!");                     // an emoji
  EXPECT_EQ(printable_ascii("a\tb\nc"), "a b c");
  // Bytes that are not UTF-8 count one '?' each, also a lead byte cut short.
  EXPECT_EQ(printable_ascii("\xff\xfe"), "??");
  EXPECT_EQ(printable_ascii("x\xe5\xbc"), "x??");
  EXPECT_EQ(printable_ascii(std::string("a\0b", 3)), "a?b");
  EXPECT_EQ(printable_ascii("\x7f"), "?");
}

TEST(BitmapFont, TruncateKeepsTheStart) {
  EXPECT_EQ(truncate_text("Hangzhou", 8), "Hangzhou");
  EXPECT_EQ(truncate_text("Hangzhou", 6), "Hang..");
  EXPECT_EQ(truncate_text("", 3), "");
  expect_error([] { truncate_text("abc", 2); }, ErrorKind::kValue, {"max_chars", "got 2"});
}

TEST(BitmapFont, BoxSizes) {
  EXPECT_EQ(text_box("ab", {.scale = 2}), (Box{0, 0, 22, 14}));  // (2 * 6 - 1) * 2 by 7 * 2
  EXPECT_EQ(text_box("ab", {.scale = 2, .direction = TextDirection::kUp}), (Box{0, 0, 14, 22}));
  EXPECT_EQ(text_box("").width, 0);
  // Measured after the '?' fallback: one glyph per code point.
  EXPECT_EQ(text_box("\xe5\xbc\xa0").width, 5);
  expect_error([] { text_box("a", {.scale = 0}); }, ErrorKind::kValue, {"scale", "got 0"});
}

TEST(BitmapFont, DrawsInsideItsBoxAndUpIsTheTurnedImage) {
  RgbImage right = blank_image(40, 40, kWhite);
  RgbImage up = blank_image(40, 40, kWhite);
  const std::string text = "Fy7";
  const Box a = draw_text(right, 2, 3, text, {.scale = 2});
  const Box b = draw_text(up, 2, 3, text, {.scale = 2, .direction = TextDirection::kUp});
  EXPECT_EQ(a, (Box{2, 3, 34, 14}));
  EXPECT_EQ(b, (Box{2, 3, 14, 34}));
  EXPECT_EQ(ink(right, a), ink(right, {0, 0, 40, 40}));  // nothing outside the box
  EXPECT_GT(ink(right, a), 3 * 2 * 2 * 5);               // some pixels per glyph
  // Turning counter-clockwise: (u, v) in the box of `right` lands on
  // (v, height - 1 - u) in the box of `up`.
  for (int64_t v = 0; v < a.height; ++v)
    for (int64_t u = 0; u < a.width; ++u)
      ASSERT_EQ(right.at(a.x + u, a.y + v), up.at(b.x + v, b.y + b.height - 1 - u))
          << "u = " << u << ", v = " << v;
  // F: the top row is full, so the first font row of 'F' is 5 glyph pixels of ink.
  for (int64_t u = 0; u < 10; ++u) EXPECT_NE(right.at(a.x + u, a.y), kWhite) << u;
  EXPECT_EQ(right.at(a.x + 10, a.y), kWhite);  // the gap before 'y'
  // Drawing partly outside the image clips instead of failing.
  draw_text(right, 35, 35, "clipped", {.scale = 3});
  draw_text(right, -50, -50, "gone");
}

TEST(LabelledHeatmap, LabelsTitleAndColorBarValuesAreDrawn) {
  const int64_t n = 6;
  const HeatmapImage image = render_heatmap(uniform(n), labelled(n));
  const Box all = {0, 0, image.width, image.height};
  const std::vector<std::pair<const char*, Box>> parts = {
      {"title", image.title},
      {"row_labels", image.row_labels},
      {"col_labels", image.col_labels},
      {"row_axis_label", image.row_axis_label},
      {"col_axis_label", image.col_axis_label},
      {"colorbar_labels", image.colorbar_labels}};
  for (const auto& [name, box] : parts) {
    SCOPED_TRACE(name);
    ASSERT_FALSE(box.empty());
    EXPECT_TRUE(inside(box, all));
    EXPECT_FALSE(overlaps(box, image.cells));
    EXPECT_FALSE(overlaps(box, image.colorbar));
    EXPECT_GT(ink(image, box), 20);
  }
  EXPECT_FALSE(overlaps(image.row_labels, image.col_labels));
  EXPECT_FALSE(overlaps(image.title, image.row_labels));
  // Row labels sit left of the cells, column labels below, the title above.
  EXPECT_LE(image.row_labels.x + image.row_labels.width, image.cells.x);
  EXPECT_GE(image.col_labels.y, image.cells.y + image.cells.height);
  EXPECT_LE(image.title.y + image.title.height, image.cells.y);
  // "Hangzhou" is wider than a 24-pixel cell: the column labels are turned.
  EXPECT_GT(image.col_labels.height, image.col_labels.width / n);
}

TEST(LabelledHeatmap, ShortColumnLabelsStayHorizontal) {
  HeatmapOptions o;
  o.cell_pixels = 20;
  o.col_labels = {"K1", "V1", "?"};
  const HeatmapImage image = render_heatmap(uniform(3), o);
  EXPECT_EQ(image.col_labels.height, kGlyphHeight);  // one line at scale 1
  EXPECT_GT(ink(image, image.col_labels), 10);
}

// The value `text` drawn where the top tick's value goes: right of the bar,
// centred on the bar's top row.
bool top_value_is(const HeatmapImage& image, const std::string& text) {
  const int64_t scale = 1;  // cell_pixels < 32
  const int64_t x = image.colorbar_labels.x + 5 * scale;
  const int64_t y = image.colorbar.y + 1 - kGlyphHeight * scale / 2;
  RgbImage expected = blank_image(image.width, image.height, kWhite);
  const Box box = draw_text(expected, x, y, text, {.scale = static_cast<int>(scale)});
  for (int64_t yy = box.y; yy < box.y + box.height; ++yy)
    for (int64_t xx = box.x; xx < box.x + box.width; ++xx)
      if ((expected.at(xx, yy) == kWhite) != (image.at(xx, yy) == kWhite)) return false;
  return true;
}

TEST(LabelledHeatmap, ColorBarValuesFollowTheRange) {
  HeatmapOptions o;
  o.cell_pixels = 16;
  const HeatmapImage unit = render_heatmap(uniform(3), o);  // 0 0.25 0.5 0.75 1
  EXPECT_TRUE(top_value_is(unit, "1"));
  EXPECT_FALSE(top_value_is(unit, "2"));
  EXPECT_EQ(unit.colorbar_labels.width, 5 + text_box("0.25").width);
  o.vmax = 2.0;
  const HeatmapImage two = render_heatmap(uniform(3), o);  // 0 0.5 1 1.5 2
  EXPECT_TRUE(top_value_is(two, "2"));
  EXPECT_EQ(two.colorbar_labels.width, 5 + text_box("1.5").width);
  o.auto_range = true;
  const HeatmapImage data = render_heatmap(matrix_of({0.125f, 0.5f}), o);
  EXPECT_TRUE(top_value_is(data, "0.5"));
  o.colorbar_ticks = 0;
  EXPECT_TRUE(render_heatmap(uniform(3), o).colorbar_labels.empty());
}

TEST(LabelledHeatmap, SizeGrowsWithTheTokenCount) {
  int64_t width = 0, height = 0;
  for (int64_t n : {2, 4, 8, 16}) {
    HeatmapOptions o = labelled(n);
    o.title = "t";  // a long title would set the width of the small maps
    const HeatmapImage image = render_heatmap(uniform(n), o);
    EXPECT_GT(image.width, width) << n;
    EXPECT_GT(image.height, height) << n;
    width = image.width;
    height = image.height;
  }
}

TEST(LabelledHeatmap, NonAsciiTokensDrawAsQuestionMarks) {
  HeatmapOptions o = labelled(2);
  o.row_labels = {"\xe5\xbc\xa0\xe4\xb8\x89", "\xff"};  // 张三, a stray byte
  HeatmapOptions fallback = o;
  fallback.row_labels = {"??", "?"};
  const HeatmapImage a = render_heatmap(uniform(2), o);
  const HeatmapImage b = render_heatmap(uniform(2), fallback);
  EXPECT_EQ(a.row_labels, b.row_labels);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_GT(ink(a, a.row_labels), 10);
}

TEST(LabelledHeatmap, LongLabelsAreCut) {
  HeatmapOptions o;
  o.row_labels = {std::string(200, 'x')};
  o.max_label_chars = 10;
  const HeatmapImage image = render_heatmap(Tensor::ones({1, 1}), o);
  EXPECT_EQ(image.row_labels.width, text_box("xxxxxxxx..", {.scale = 2}).width);
}

class LabelledHeatmapFiles : public qkv_test::TempDirTest {};

TEST_F(LabelledHeatmapFiles, PngReadBackHasTextInTheMargins) {
  const int64_t n = 5;
  const fs::path path = dir_ / "attn.png";
  write_heatmap_png(path, uniform(n), labelled(n));
  const HeatmapImage expected = render_heatmap(uniform(n), labelled(n));
  const RgbImage png = read_png(path);
  ASSERT_EQ(png.width, expected.width);
  ASSERT_EQ(png.height, expected.height);
  EXPECT_EQ(png.pixels, expected.pixels);
  // Margins: the band left of the cells, the band below them, right of the bar.
  const Box& c = expected.cells;
  EXPECT_GT(ink(png, {0, c.y, c.x, c.height}), 50);
  EXPECT_GT(ink(png, {c.x, c.y + c.height, c.width, png.height - c.y - c.height}), 50);
  EXPECT_GT(ink(png, {0, 0, png.width, c.y}), 50);
  const int64_t bar_end = expected.colorbar.x + expected.colorbar.width;
  EXPECT_GT(ink(png, {bar_end, 0, png.width - bar_end, png.height}), 20);
}

TEST(LabelledHeatmap, RejectsMismatchedLabelsAndBadTextOptions) {
  // render_heatmap of a zero matrix of `shape` with `o` is a kValue error naming `parts`.
  const auto rejects = [](const HeatmapOptions& o, const Shape& shape,
                          const std::vector<std::string>& parts, qkv_test::CallSite where = {}) {
    expect_error([&] { render_heatmap(Tensor::zeros(shape), o); }, ErrorKind::kValue, parts, where);
  };
  rejects({.row_labels = {"a", "b"}}, {3, 3}, {"row_labels", "2 labels", "3 rows"});
  rejects({.col_labels = {"a"}}, {3, 2}, {"col_labels", "1 labels", "2 columns"});
  rejects({.colorbar_ticks = 1}, {2, 2}, {"colorbar_ticks", "got 1"});
  rejects({.text_scale = 9}, {2, 2}, {"text_scale", "got 9"});
  rejects({.max_label_chars = 2}, {2, 2}, {"max_label_chars", "got 2"});
}

}  // namespace
}  // namespace qkv::viz
