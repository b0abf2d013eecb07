// Tensor printing in PyTorch's style: nested brackets, fixed decimals,
// "..." for the middle of large tensors.
#include <cmath>
#include <cstdio>
#include <string>

#include "qkv/tensor.h"

namespace qkv {

namespace {

constexpr int64_t kSummarizeAbove = 1000;  // torch's default print threshold
constexpr int64_t kEdgeItems = 3;          // torch's default edgeitems

std::string format_number(double x, DType dtype, int precision) {
  if (dtype == DType::kBool) return x != 0.0 ? "True" : "False";
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, x);
  return buffer;
}

void print_level(std::string& out, const Tensor& t, int64_t level, int precision, bool summarize,
                 size_t width, int64_t indent) {
  if (t.dim() == 0) {
    std::string s = format_number(t.item(), t.dtype(), precision);
    out += std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
    return;
  }
  out += '[';
  const int64_t n = t.size(0);
  const bool cut = summarize && n > 2 * kEdgeItems;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      out += t.dim() == 1 ? "..., " : "...,\n" + std::string(indent + level + 1, ' ');
      i = n - kEdgeItems - 1;
      continue;
    }
    print_level(out, t.select(0, i), level + 1, precision, summarize, width, indent);
    if (i + 1 < n) {
      if (t.dim() == 1) {
        out += ", ";
      } else {
        out += ',' + std::string(static_cast<size_t>(t.dim() - 1), '\n');
        out += std::string(indent + level + 1, ' ');
      }
    }
  }
  out += ']';
}

}  // namespace

std::string Tensor::to_string(int precision) const {
  if (!defined()) return "tensor(undefined)";
  const bool summarize = numel() > kSummarizeAbove;
  // Common width so that columns line up.
  size_t width = 0;
  for (double x : to_vector()) width = std::max(width, format_number(x, dtype_, precision).size());
  std::string out = "tensor(";
  print_level(out, *this, 0, precision, summarize, width, 7);
  if (dtype_ != DType::kFloat32) out += std::string(", dtype=") + dtype_name(dtype_);
  out += ", shape=" + shape_str(shape_) + ")";
  return out;
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.to_string(); }

}  // namespace qkv
