// For the heatmap tests (tests/test_heatmap*.cc, linked to libpng): reads a
// PNG back with libpng's simplified API, independently of qkv's own encoder.
#pragma once

#include <gtest/gtest.h>
#include <png.h>

#include <cstring>
#include <filesystem>

#include "qkv/viz/image.h"

namespace qkv_test {

// The heatmaps' background.
inline constexpr qkv::viz::Rgb kWhite = {255, 255, 255};

// The 8-bit RGB image of a colour PNG without alpha (as qkv writes them); a
// test failure and an empty image when libpng cannot read it.
inline qkv::viz::RgbImage read_png(const std::filesystem::path& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  qkv::viz::RgbImage out;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    ADD_FAILURE() << "libpng cannot open " << path << ": " << image.message;
    return out;
  }
  EXPECT_TRUE(image.format & PNG_FORMAT_FLAG_COLOR);
  EXPECT_FALSE(image.format & PNG_FORMAT_FLAG_ALPHA);
  image.format = PNG_FORMAT_RGB;
  out.width = image.width;
  out.height = image.height;
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr))
    ADD_FAILURE() << "libpng cannot decode " << path << ": " << image.message;
  return out;
}

}  // namespace qkv_test
