// Text in images without a font library: a built-in 5 x 7 pixel font for
// printable ASCII, drawn at an integer scale, horizontally or turned 90°
// (reading bottom to top, as matplotlib's rotation=90 tick labels).
//
//   viz::draw_text(image, 10, 4, "layer 0 head 1", {.scale = 2});
//
// Every glyph is 5 pixels wide and 7 high; glyphs are 1 pixel apart, so a text
// of n characters is 6n - 1 pixels wide (times the scale).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "qkv/viz/image.h"

namespace qkv::viz {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
inline constexpr int kGlyphAdvance = kGlyphWidth + 1;

// What the font can draw of a UTF-8 string: printable ASCII stays as it is;
// every other code point (and every byte that is not valid UTF-8) becomes one
// '?', tabs and newlines a space. "Zhang 张三" -> "Zhang ??".
std::string printable_ascii(std::string_view utf8);

// `text` shortened to at most `max_chars` characters (max_chars >= 3): a longer
// one keeps its first max_chars - 2 characters followed by "..".
std::string truncate_text(std::string_view text, int max_chars);

enum class TextDirection {
  kRight,  // left to right, as usual
  kUp,     // turned 90° counter-clockwise: reads bottom to top
};

struct TextStyle {
  int scale = 1;  // each font pixel becomes scale x scale image pixels, 1..64
  Rgb color = {40, 40, 40};
  TextDirection direction = TextDirection::kRight;
};

// Size of `text` (after printable_ascii) as drawn with `style`: for kRight the
// width is along x; for kUp the box is 7 * scale wide and the text runs along y.
Box text_box(std::string_view text, const TextStyle& style = {});

// Draws `text` (passed through printable_ascii) with the top-left corner of its
// box (text_box) at (x, y); pixels outside the image are skipped.
// Returns the box drawn into.
Box draw_text(RgbImage& image, int64_t x, int64_t y, std::string_view text,
              const TextStyle& style = {});

}  // namespace qkv::viz
