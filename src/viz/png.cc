// RGB images: pixel access, rectangles, and PNG encoding with libpng.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <new>

#include "qkv/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/viz/image.h"

namespace qkv::viz {

namespace {

// PNG allows 2^31 - 1, but common readers (libpng's default) stop at 10^6 per side.
constexpr int64_t kMaxSide = int64_t{1} << 16;
// Keeps the RGB buffer under ~200 MB.
constexpr int64_t kMaxPixels = int64_t{1} << 26;

// libpng reports errors through a callback that must not return; it jumps
// back to the setjmp in encode_png with the message kept here.
struct PngContext {
  std::vector<std::byte>* out = nullptr;
  bool out_of_memory = false;
  char message[256] = {};
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* context = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(context->message, sizeof context->message, "%s", message);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void append_png_bytes(png_structp png, png_bytep data, png_size_t length) {
  auto* context = static_cast<PngContext*>(png_get_io_ptr(png));
  try {
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    context->out->insert(context->out->end(), bytes, bytes + length);
  } catch (const std::bad_alloc&) {
    context->out_of_memory = true;
  }
  // Outside the try block, so no C++ frame with live objects is jumped over.
  if (context->out_of_memory) png_error(png, "out of memory");
}

void flush_png_bytes(png_structp) {}

}  // namespace

Rgb RgbImage::at(int64_t x, int64_t y) const {
  QKV_CHECK(x >= 0 && x < width && y >= 0 && y < height, "RgbImage::at: pixel (", x, ", ", y,
            ") is outside the ", width, " x ", height, " image");
  const uint8_t* p = pixels.data() + (y * width + x) * 3;
  return {p[0], p[1], p[2]};
}

RgbImage blank_image(int64_t width, int64_t height, Rgb color) {
  QKV_CHECK(width > 0 && height > 0 && width <= kMaxSide && height <= kMaxSide &&
                width * height <= kMaxPixels,
            "blank_image: size must be in [1, ", kMaxSide, "] per side and at most ", kMaxPixels,
            " pixels in all, got ", width, " x ", height);
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width * height * 3));
  fill_rect(image, {0, 0, width, height}, color);
  return image;
}

void fill_rect(RgbImage& image, const Box& box, Rgb color) {
  const int64_t x0 = std::max<int64_t>(box.x, 0);
  const int64_t y0 = std::max<int64_t>(box.y, 0);
  const int64_t x1 = std::min(box.x + box.width, image.width);
  const int64_t y1 = std::min(box.y + box.height, image.height);
  for (int64_t y = y0; y < y1; ++y) {
    uint8_t* p = image.pixels.data() + (y * image.width + x0) * 3;
    for (int64_t x = x0; x < x1; ++x, p += 3) {
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
    }
  }
}

std::vector<std::byte> encode_png(const RgbImage& image) {
  QKV_CHECK(
      image.width > 0 && image.height > 0 && image.width <= kMaxSide && image.height <= kMaxSide,
      "encode_png: image size must be in [1, ", kMaxSide, "] per side, got ", image.width, " x ",
      image.height);
  QKV_CHECK(image.pixels.size() == static_cast<size_t>(image.width * image.height * 3),
            "encode_png: image.pixels must hold width * height * 3 = ",
            image.width * image.height * 3, " bytes, got ", image.pixels.size());

  std::vector<std::byte> out;
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) {
    // libpng only reads the rows; its API is not const-correct.
    rows[y] = const_cast<png_bytep>(image.pixels.data() + y * image.width * 3);
  }
  PngContext context;
  context.out = &out;

  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &context, on_png_error, on_png_warning);
  if (png == nullptr)
    throw Error(ErrorKind::kIO, "encode_png: libpng could not start (out of memory)");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    throw Error(ErrorKind::kIO, "encode_png: libpng could not start (out of memory)");
  }
  // Nothing between here and the end may own resources: a libpng error jumps back here.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw Error(ErrorKind::kIO, detail::concat("encode_png: libpng failed: ", context.message));
  }
  png_set_write_fn(png, &context, append_png_bytes, flush_png_bytes);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width),
               static_cast<png_uint_32>(image.height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void write_png(const std::filesystem::path& path, const RgbImage& image) {
  const std::vector<std::byte> bytes = encode_png(image);
  io::write_file_atomically(path, bytes);
}

}  // namespace qkv::viz
