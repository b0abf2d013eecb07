// Heatmap rendering (Blues colour map, grid, colour bar) and PNG encoding with libpng.
#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "qkv/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/viz/heatmap.h"

namespace qkv::viz {

namespace {

// ColorBrewer's 9-class "Blues", light to dark; matplotlib's Blues interpolates
// linearly between these nine colours, equally spaced over [0, 1].
constexpr std::array<Rgb, 9> kBlues = {{{247, 251, 255},
                                        {222, 235, 247},
                                        {198, 219, 239},
                                        {158, 202, 225},
                                        {107, 174, 214},
                                        {66, 146, 198},
                                        {33, 113, 181},
                                        {8, 81, 156},
                                        {8, 48, 107}}};

constexpr Rgb kGridColor = {200, 200, 200};  // visible on the lightest blue and the darkest
constexpr Rgb kBackground = {255, 255, 255};

constexpr int kMaxCellPixels = 512;
// Keeps the RGB buffer under ~200 MB; a matrix that big wants a smaller cell_pixels.
constexpr int64_t kMaxPixels = int64_t{1} << 26;
// PNG allows 2^31 - 1, but common readers (libpng's default) stop at 10^6 per side.
constexpr int64_t kMaxSide = int64_t{1} << 16;

// Where things go in the image; everything in pixels.
struct Layout {
  int64_t cell = 0, grid = 0;
  int64_t matrix_width = 0, matrix_height = 0;  // cells plus grid lines
  int64_t bar_x = 0, bar_width = 0;             // the colour bar's inner strip
  int64_t width = 0, height = 0;
};

Layout make_layout(int64_t rows, int64_t cols, const HeatmapOptions& options) {
  Layout l;
  l.cell = options.cell_pixels;
  l.grid = options.grid_pixels;
  l.matrix_width = cols * l.cell + (cols + 1) * l.grid;
  l.matrix_height = rows * l.cell + (rows + 1) * l.grid;
  l.width = l.matrix_width;
  l.height = l.matrix_height;
  if (options.colorbar) {
    const int64_t gap = std::max<int64_t>(4, l.cell / 2);
    l.bar_width = std::max<int64_t>(8, l.cell / 2);
    l.bar_x = l.matrix_width + gap + l.grid;
    l.width = l.bar_x + l.bar_width + l.grid;
  }
  return l;
}

void fill_rect(RgbImage& image, int64_t x0, int64_t y0, int64_t w, int64_t h, Rgb color) {
  for (int64_t y = y0; y < y0 + h; ++y) {
    uint8_t* p = image.pixels.data() + (y * image.width + x0) * 3;
    for (int64_t x = 0; x < w; ++x, p += 3) {
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
    }
  }
}

RgbImage render(const Tensor& matrix, const HeatmapOptions& options, const char* who) {
  QKV_CHECK(matrix.defined(), who, ": matrix is undefined; expected a 2-D tensor [rows, cols]");
  QKV_CHECK(matrix.dim() == 2, who, ": matrix must be 2-D [rows, cols], got shape ",
            shape_str(matrix.shape()),
            " (for attention weights [B, H, L, S], pick one map with .select(0, b).select(0, h))");
  const int64_t rows = matrix.size(0);
  const int64_t cols = matrix.size(1);
  QKV_CHECK(rows > 0 && cols > 0, who, ": matrix is empty (shape ", shape_str(matrix.shape()),
            "); expected at least one row and one column");
  QKV_CHECK(options.cell_pixels >= 1 && options.cell_pixels <= kMaxCellPixels, who,
            ": options.cell_pixels must be in [1, ", kMaxCellPixels, "], got ",
            options.cell_pixels);
  QKV_CHECK(options.grid_pixels >= 0 && options.grid_pixels <= options.cell_pixels, who,
            ": options.grid_pixels must be in [0, cell_pixels = ", options.cell_pixels, "], got ",
            options.grid_pixels);
  if (!options.auto_range) {
    QKV_CHECK(
        std::isfinite(options.vmin) && std::isfinite(options.vmax) && options.vmin < options.vmax,
        who, ": options.vmin < options.vmax (both finite) expected, got vmin = ", options.vmin,
        ", vmax = ", options.vmax);
  }

  const Layout layout = make_layout(rows, cols, options);
  QKV_CHECK(layout.width <= kMaxSide && layout.height <= kMaxSide &&
                layout.width * layout.height <= kMaxPixels,
            who, ": a ", shape_str(matrix.shape()),
            " matrix at cell_pixels = ", options.cell_pixels, " makes a ", layout.width, " x ",
            layout.height, " pixel image, more than the limit of ", kMaxSide,
            " pixels per side and ", kMaxPixels, " pixels in all; lower cell_pixels");

  const std::vector<double> values = matrix.to_vector();
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    QKV_CHECK(!std::isnan(v), who, ": matrix has NaN at [", static_cast<int64_t>(i) / cols, ", ",
              static_cast<int64_t>(i) % cols,
              "]; a heatmap needs numbers (NaN in attention weights often means a row whose "
              "keys are all masked)");
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }

  RgbImage image;
  image.vmin = options.vmin;
  image.vmax = options.vmax;
  if (options.auto_range) {
    QKV_CHECK(lo <= hi, who, ": options.auto_range needs at least one finite value in the matrix");
    image.vmin = lo < hi ? lo : lo - 0.5;
    image.vmax = lo < hi ? hi : hi + 0.5;
  }
  image.width = layout.width;
  image.height = layout.height;
  image.pixels.resize(static_cast<size_t>(image.width * image.height * 3));
  fill_rect(image, 0, 0, image.width, image.height, kBackground);

  // Cells: the grid colour everywhere, then each cell's square on top.
  const double span = image.vmax - image.vmin;
  fill_rect(image, 0, 0, layout.matrix_width, layout.matrix_height, kGridColor);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double t = (values[i * cols + j] - image.vmin) / span;
      fill_rect(image, layout.grid + j * (layout.cell + layout.grid),
                layout.grid + i * (layout.cell + layout.grid), layout.cell, layout.cell,
                blues_color(t));
    }
  }

  // Colour bar: vmax at the top row of the strip, vmin at the bottom row.
  if (options.colorbar) {
    fill_rect(image, layout.bar_x - layout.grid, 0, layout.bar_width + 2 * layout.grid,
              layout.matrix_height, kGridColor);
    const int64_t inner = layout.matrix_height - 2 * layout.grid;
    for (int64_t y = 0; y < inner; ++y) {
      const double t =
          inner > 1 ? 1.0 - static_cast<double>(y) / static_cast<double>(inner - 1) : 1.0;
      fill_rect(image, layout.bar_x, layout.grid + y, layout.bar_width, 1, blues_color(t));
    }
  }
  return image;
}

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

Rgb blues_color(double t) {
  if (!(t > 0.0)) t = 0.0;  // also NaN
  if (t > 1.0) t = 1.0;
  const double position = t * static_cast<double>(kBlues.size() - 1);
  const size_t lower = std::min(static_cast<size_t>(position), kBlues.size() - 2);
  const double frac = position - static_cast<double>(lower);
  const Rgb a = kBlues[lower];
  const Rgb b = kBlues[lower + 1];
  auto mix = [frac](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(std::lround(x + (static_cast<double>(y) - x) * frac));
  };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

Rgb RgbImage::at(int64_t x, int64_t y) const {
  QKV_CHECK(x >= 0 && x < width && y >= 0 && y < height, "RgbImage::at: pixel (", x, ", ", y,
            ") is outside the ", width, " x ", height, " image");
  const uint8_t* p = pixels.data() + (y * width + x) * 3;
  return {p[0], p[1], p[2]};
}

RgbImage render_heatmap(const Tensor& matrix, const HeatmapOptions& options) {
  return render(matrix, options, "render_heatmap");
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

void write_heatmap_png(const std::filesystem::path& path, const Tensor& matrix,
                       const HeatmapOptions& options) {
  QKV_CHECK(!path.empty(),
            "write_heatmap_png: path is empty; expected a file name such as attn.png");
  const RgbImage image = render(matrix, options, "write_heatmap_png");
  write_png(path, image);
}

}  // namespace qkv::viz
