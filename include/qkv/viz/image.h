// 8-bit RGB images in memory and their PNG encoding (libpng).
//
//   viz::RgbImage image = viz::blank_image(64, 32, {255, 255, 255});
//   viz::fill_rect(image, {.x = 8, .y = 8, .width = 16, .height = 16}, {8, 48, 107});
//   viz::write_png("square.png", image);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace qkv::viz {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// A rectangle of pixels: columns [x, x + width), rows [y, y + height).
struct Box {
  int64_t x = 0, y = 0, width = 0, height = 0;
  bool empty() const { return width <= 0 || height <= 0; }
  bool operator==(const Box&) const = default;
};

// An 8-bit RGB image, rows top to bottom.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3 bytes, row-major, R G B

  // Throws qkv::Error naming the pixel when (x, y) is outside the image.
  Rgb at(int64_t x, int64_t y) const;
};

// A width x height image filled with `color`. Sizes must be positive.
RgbImage blank_image(int64_t width, int64_t height, Rgb color);

// Paints `box`, clipped to the image.
void fill_rect(RgbImage& image, const Box& box, Rgb color);

// Encodes an image as an 8-bit RGB PNG file's bytes (libpng).
std::vector<std::byte> encode_png(const RgbImage& image);

// Writes `image` as a PNG file, atomically (io::write_file_atomically): a
// reader sees the old file or the complete new one, never half of it. Throws
// qkv::Error (ErrorKind::kIO) naming the path when it cannot be written.
void write_png(const std::filesystem::path& path, const RgbImage& image);

}  // namespace qkv::viz
