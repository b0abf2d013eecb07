// Heatmap rendering: Blues colour map, grid, colour bar with values, labels and title.
#include "qkv/viz/heatmap.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "qkv/error.h"
#include "qkv/viz/bitmap_font.h"

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
constexpr Rgb kInk = {40, 40, 40};

constexpr int kMaxCellPixels = 512;
constexpr int kMaxTicks = 11;
constexpr int kMaxTextScale = 8;
constexpr int kMaxTitleChars = 160;
// Colour bar ticks: a mark 2 font pixels long, then the value after a gap wide
// enough that the mark does not read as a minus sign.
constexpr int64_t kTickTextOffset = 5;
// Keeps the RGB buffer under ~200 MB; a matrix that big wants a smaller cell_pixels.
constexpr int64_t kMaxPixels = int64_t{1} << 26;
// PNG allows 2^31 - 1, but common readers (libpng's default) stop at 10^6 per side.
constexpr int64_t kMaxSide = int64_t{1} << 16;

// The texts as drawn: printable ASCII, cut to length.
struct Texts {
  std::string title, row_axis, col_axis;
  std::vector<std::string> rows, cols, ticks;
  std::vector<double> tick_values;
};

std::string tick_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value + 0.0);  // + 0.0: no "-0"
  return buffer;
}

// Where things go in the image; everything in pixels.
struct Layout {
  int64_t cell = 0, grid = 0, scale = 1;
  bool rotate_cols = false;
  HeatmapImage boxes;  // only the Box members and the size are filled in
  int64_t bar_inner_x = 0, bar_inner_width = 0;
};

int text_scale(const HeatmapOptions& o) {
  return o.text_scale > 0 ? o.text_scale : (o.cell_pixels >= 32 ? 2 : 1);
}

// How many colour bar values fit along a bar of `inner` pixels without their
// lines touching: fewer than asked on a short bar (a map of one or two rows).
int fitting_ticks(const HeatmapOptions& o, int64_t inner) {
  const int64_t pitch = int64_t{kGlyphHeight + 1} * text_scale(o);
  const int64_t fit = 1 + std::max<int64_t>(inner - 1, 0) / pitch;
  return static_cast<int>(std::clamp<int64_t>(fit, 2, o.colorbar_ticks));
}

int64_t longest(const std::vector<std::string>& texts, const TextStyle& style) {
  int64_t n = 0;
  for (const std::string& t : texts) n = std::max(n, text_box(t, style).width);
  return n;
}

Layout make_layout(int64_t rows, int64_t cols, const HeatmapOptions& o, const Texts& t) {
  Layout l;
  l.cell = o.cell_pixels;
  l.grid = o.grid_pixels;
  l.scale = text_scale(o);
  const int64_t s = l.scale;
  const TextStyle right{.scale = static_cast<int>(s)};
  const int64_t line = int64_t{kGlyphHeight} * s;  // height of one line of text
  const int64_t gap = 3 * s;                       // between text and what it labels
  const bool ticks = o.colorbar && o.colorbar_ticks > 0;
  const bool any_text = ticks || !t.title.empty() || !t.rows.empty() || !t.cols.empty() ||
                        !t.row_axis.empty() || !t.col_axis.empty();
  const int64_t margin = any_text ? 3 * s : 0;
  HeatmapImage& b = l.boxes;

  const int64_t cells_width = cols * l.cell + (cols + 1) * l.grid;
  const int64_t cells_height = rows * l.cell + (rows + 1) * l.grid;

  // Left to right: axis name, row labels, cells, colour bar, its values.
  int64_t x = margin;
  if (!t.row_axis.empty()) {
    b.row_axis_label = {x, 0, line, text_box(t.row_axis, right).width};
    x += line + gap;
  }
  if (!t.rows.empty()) {
    b.row_labels = {x, 0, longest(t.rows, right), cells_height};
    x += b.row_labels.width + gap;
  }
  b.cells = {x, 0, cells_width, cells_height};
  x += cells_width;
  if (o.colorbar) {
    const int64_t bar_gap = std::max<int64_t>(4, l.cell / 2);
    l.bar_inner_width = std::max<int64_t>(8, l.cell / 2);
    b.colorbar = {x + bar_gap, 0, l.bar_inner_width + 2 * l.grid, cells_height};
    l.bar_inner_x = b.colorbar.x + l.grid;
    x = b.colorbar.x + b.colorbar.width;
    if (ticks) {
      b.colorbar_labels = {x, 0, kTickTextOffset * s + longest(t.ticks, right), cells_height};
      x += b.colorbar_labels.width;
    }
  }
  int64_t width = x + margin;

  // Top to bottom: title, cells, column labels, axis name.
  int64_t y = margin;
  if (!t.title.empty()) {
    const int64_t title_width = text_box(t.title, right).width;
    // Centred over the cells, moved right if it would start left of the margin.
    const int64_t title_x = std::max(margin, b.cells.x + (b.cells.width - title_width) / 2);
    b.title = {title_x, y, title_width, line};
    width = std::max(width, title_x + title_width + margin);
    y += line + gap;
  }
  // Tick values are centred on their tick: the top one reaches half a line above the bar.
  if (ticks) y = std::max(y, line / 2 + 1);
  b.cells.y = y;
  b.row_labels.y = y;
  b.colorbar.y = y;
  b.colorbar_labels.y = y - line / 2 - 1;
  b.colorbar_labels.height = ticks ? cells_height + line + 2 : 0;
  b.row_axis_label.y = y + std::max<int64_t>(0, (cells_height - b.row_axis_label.height) / 2);
  y += cells_height;
  if (!t.cols.empty()) {
    const int64_t widest = longest(t.cols, right);
    l.rotate_cols = widest > l.cell + l.grid - s;  // horizontal ones would touch
    b.col_labels = {b.cells.x, y + gap, cells_width, l.rotate_cols ? widest : line};
    y = b.col_labels.y + b.col_labels.height;
  }
  if (!t.col_axis.empty()) {
    const int64_t w = text_box(t.col_axis, right).width;
    b.col_axis_label = {b.cells.x + (cells_width - w) / 2, y + gap, w, line};
    if (b.col_axis_label.x < margin) b.col_axis_label.x = margin;
    width = std::max(width, b.col_axis_label.x + w + margin);
    y = b.col_axis_label.y + line;
  }
  if (ticks) y = std::max(y, b.colorbar_labels.y + b.colorbar_labels.height);
  l.boxes.width = width;
  l.boxes.height = y + margin;
  return l;
}

Texts prepare_texts(const HeatmapOptions& o) {
  Texts t;
  t.title = truncate_text(printable_ascii(o.title), kMaxTitleChars);
  t.row_axis = truncate_text(printable_ascii(o.row_axis_label), kMaxTitleChars);
  t.col_axis = truncate_text(printable_ascii(o.col_axis_label), kMaxTitleChars);
  for (const std::string& s : o.row_labels)
    t.rows.push_back(truncate_text(printable_ascii(s), o.max_label_chars));
  for (const std::string& s : o.col_labels)
    t.cols.push_back(truncate_text(printable_ascii(s), o.max_label_chars));
  return t;
}

void check_options(const HeatmapOptions& o, int64_t rows, int64_t cols, const char* who) {
  QKV_CHECK(o.cell_pixels >= 1 && o.cell_pixels <= kMaxCellPixels, who,
            ": options.cell_pixels must be in [1, ", kMaxCellPixels, "], got ", o.cell_pixels);
  QKV_CHECK(o.grid_pixels >= 0 && o.grid_pixels <= o.cell_pixels, who,
            ": options.grid_pixels must be in [0, cell_pixels = ", o.cell_pixels, "], got ",
            o.grid_pixels);
  if (!o.auto_range) {
    QKV_CHECK(std::isfinite(o.vmin) && std::isfinite(o.vmax) && o.vmin < o.vmax, who,
              ": options.vmin < options.vmax (both finite) expected, got vmin = ", o.vmin,
              ", vmax = ", o.vmax);
  }
  QKV_CHECK(o.colorbar_ticks == 0 || (o.colorbar_ticks >= 2 && o.colorbar_ticks <= kMaxTicks), who,
            ": options.colorbar_ticks must be 0 or in [2, ", kMaxTicks, "], got ",
            o.colorbar_ticks);
  QKV_CHECK(o.text_scale >= 0 && o.text_scale <= kMaxTextScale, who,
            ": options.text_scale must be in [0, ", kMaxTextScale, "] (0: automatic), got ",
            o.text_scale);
  QKV_CHECK(o.max_label_chars >= 3 && o.max_label_chars <= 64, who,
            ": options.max_label_chars must be in [3, 64], got ", o.max_label_chars);
  QKV_CHECK(o.row_labels.empty() || static_cast<int64_t>(o.row_labels.size()) == rows, who,
            ": options.row_labels has ", o.row_labels.size(), " labels for a matrix of ", rows,
            " rows; give one per row or none");
  QKV_CHECK(o.col_labels.empty() || static_cast<int64_t>(o.col_labels.size()) == cols, who,
            ": options.col_labels has ", o.col_labels.size(), " labels for a matrix of ", cols,
            " columns; give one per column or none");
}

HeatmapImage render(const Tensor& matrix, const HeatmapOptions& options, const char* who) {
  QKV_CHECK(matrix.defined(), who, ": matrix is undefined; expected a 2-D tensor [rows, cols]");
  QKV_CHECK(matrix.dim() == 2, who, ": matrix must be 2-D [rows, cols], got shape ",
            shape_str(matrix.shape()),
            " (for attention weights [B, H, L, S], pick one map with .select(0, b).select(0, h))");
  const int64_t rows = matrix.size(0);
  const int64_t cols = matrix.size(1);
  QKV_CHECK(rows > 0 && cols > 0, who, ": matrix is empty (shape ", shape_str(matrix.shape()),
            "); expected at least one row and one column");
  check_options(options, rows, cols, who);
  // The cells alone must fit before anything is computed from their size.
  const int64_t cells_side = std::max(rows, cols) * (options.cell_pixels + options.grid_pixels);
  QKV_CHECK(cells_side <= kMaxSide &&
                rows * cols * options.cell_pixels * options.cell_pixels <= kMaxPixels,
            who, ": a ", shape_str(matrix.shape()),
            " matrix at cell_pixels = ", options.cell_pixels,
            " makes an image of more than the limit of ", kMaxSide, " pixels per side or ",
            kMaxPixels, " pixels in all; lower cell_pixels");

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
  double vmin = options.vmin, vmax = options.vmax;
  if (options.auto_range) {
    QKV_CHECK(lo <= hi, who, ": options.auto_range needs at least one finite value in the matrix");
    vmin = lo < hi ? lo : lo - 0.5;
    vmax = lo < hi ? hi : hi + 0.5;
  }

  Texts texts = prepare_texts(options);
  if (options.colorbar && options.colorbar_ticks > 0) {
    const int64_t inner = rows * options.cell_pixels + (rows - 1) * options.grid_pixels;
    const int ticks = fitting_ticks(options, inner);
    for (int i = 0; i < ticks; ++i) {
      const double f = static_cast<double>(i) / (ticks - 1);
      texts.tick_values.push_back(vmin + (vmax - vmin) * f);
      texts.ticks.push_back(tick_text(texts.tick_values.back()));
    }
  }
  const Layout layout = make_layout(rows, cols, options, texts);
  const HeatmapImage& b = layout.boxes;
  QKV_CHECK(b.width <= kMaxSide && b.height <= kMaxSide && b.width * b.height <= kMaxPixels, who,
            ": a ", shape_str(matrix.shape()), " matrix at cell_pixels = ", options.cell_pixels,
            " makes a ", b.width, " x ", b.height, " pixel image, more than the limit of ",
            kMaxSide, " pixels per side and ", kMaxPixels, " pixels in all; lower cell_pixels");

  HeatmapImage image = b;
  static_cast<RgbImage&>(image) = blank_image(b.width, b.height, kBackground);
  image.vmin = vmin;
  image.vmax = vmax;

  // Cells: the grid colour everywhere, then each cell's square on top.
  const int64_t step = layout.cell + layout.grid;
  const double span = vmax - vmin;
  fill_rect(image, b.cells, kGridColor);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double t = (values[i * cols + j] - vmin) / span;
      fill_rect(image,
                {b.cells.x + layout.grid + j * step, b.cells.y + layout.grid + i * step,
                 layout.cell, layout.cell},
                blues_color(t));
    }
  }

  const int64_t s = layout.scale;
  const int64_t line = int64_t{kGlyphHeight} * s;
  const TextStyle right{.scale = static_cast<int>(s), .color = kInk};
  const TextStyle up{.scale = static_cast<int>(s), .color = kInk, .direction = TextDirection::kUp};

  // Colour bar: vmax at the top row of the strip, vmin at the bottom row.
  if (options.colorbar) {
    fill_rect(image, b.colorbar, kGridColor);
    const int64_t inner = b.colorbar.height - 2 * layout.grid;
    const int64_t top = b.colorbar.y + layout.grid;
    for (int64_t y = 0; y < inner; ++y) {
      const double t =
          inner > 1 ? 1.0 - static_cast<double>(y) / static_cast<double>(inner - 1) : 1.0;
      fill_rect(image, {layout.bar_inner_x, top + y, layout.bar_inner_width, 1}, blues_color(t));
    }
    // A tick mark and a value at each tick, the value's text centred on the mark.
    for (size_t i = 0; i < texts.ticks.size(); ++i) {
      const double f = (texts.tick_values[i] - vmin) / span;
      const int64_t y =
          top + std::lround((1.0 - f) * static_cast<double>(std::max<int64_t>(inner - 1, 0)));
      fill_rect(image, {b.colorbar_labels.x, y - (s - 1) / 2, 2 * s, s}, kInk);
      draw_text(image, b.colorbar_labels.x + kTickTextOffset * s, y - line / 2, texts.ticks[i],
                right);
    }
  }

  if (!texts.title.empty()) draw_text(image, b.title.x, b.title.y, texts.title, right);
  for (int64_t i = 0; i < static_cast<int64_t>(texts.rows.size()); ++i) {
    // Right-aligned against the cells, centred on the row.
    const int64_t w = text_box(texts.rows[i], right).width;
    const int64_t centre = b.cells.y + layout.grid + i * step + layout.cell / 2;
    draw_text(image, b.row_labels.x + b.row_labels.width - w, centre - line / 2, texts.rows[i],
              right);
  }
  for (int64_t j = 0; j < static_cast<int64_t>(texts.cols.size()); ++j) {
    const int64_t centre = b.cells.x + layout.grid + j * step + layout.cell / 2;
    if (layout.rotate_cols) {
      // Reads bottom to top and ends next to the cells, as rotation=90 tick labels.
      draw_text(image, centre - line / 2, b.col_labels.y, texts.cols[j], up);
    } else {
      const int64_t w = text_box(texts.cols[j], right).width;
      draw_text(image, centre - w / 2, b.col_labels.y, texts.cols[j], right);
    }
  }
  if (!texts.row_axis.empty())
    draw_text(image, b.row_axis_label.x, b.row_axis_label.y, texts.row_axis, up);
  if (!texts.col_axis.empty())
    draw_text(image, b.col_axis_label.x, b.col_axis_label.y, texts.col_axis, right);
  return image;
}

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

HeatmapImage render_heatmap(const Tensor& matrix, const HeatmapOptions& options) {
  return render(matrix, options, "render_heatmap");
}

void write_heatmap_png(const std::filesystem::path& path, const Tensor& matrix,
                       const HeatmapOptions& options) {
  QKV_CHECK(!path.empty(),
            "write_heatmap_png: path is empty; expected a file name such as attn.png");
  const HeatmapImage image = render(matrix, options, "write_heatmap_png");
  write_png(path, image);
}

}  // namespace qkv::viz
