// `qkv similarity`: the cosine similarity of every pair of texts, from their
// sentence embeddings, printed as a table whose rows name the texts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli_options.h"
#include "command.h"
#include "qkv/error.h"
#include "qkv/linear.h"
#include "qkv/models/sentence_encoder.h"
#include "sentence_input.h"

namespace qkv::cli {

namespace {

struct SimilarityOptions {
  SentenceInput input;
  int64_t label_width = 32;
};

// The next code point of UTF-8 `s` at `i` (advanced past it); U+FFFD for a
// malformed sequence, which then counts as one byte.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  const int extra = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
  if (extra < 0 || i + extra >= s.size()) {
    ++i;
    return U'\uFFFD';
  }
  char32_t c = extra == 0 ? b : b & (0x3f >> extra);
  for (int k = 1; k <= extra; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) {
      ++i;
      return U'\uFFFD';
    }
    c = (c << 6) | (byte(i + k) & 0x3f);
  }
  i += 1 + extra;
  return c;
}

// Terminal columns of a code point: 0 for combining marks, 2 for East Asian
// wide characters and emoji, 1 otherwise (enough of wcwidth for labels).
int columns(char32_t c) {
  if ((c >= 0x300 && c <= 0x36f) || (c >= 0x200b && c <= 0x200f) || c == 0xfe0f) return 0;
  const bool wide = (c >= 0x1100 && c <= 0x115f) || (c >= 0x2e80 && c <= 0xa4cf) ||
                    (c >= 0xac00 && c <= 0xd7a3) || (c >= 0xf900 && c <= 0xfaff) ||
                    (c >= 0xfe30 && c <= 0xfe4f) || (c >= 0xff00 && c <= 0xff60) ||
                    (c >= 0xffe0 && c <= 0xffe6) || (c >= 0x1f300 && c <= 0x1faff) ||
                    (c >= 0x20000 && c <= 0x3fffd);
  return wide ? 2 : 1;
}

// `text` on one line in at most `width` columns: control characters become
// spaces, and a text that does not fit is cut and ends with "…".
// -> the label and the columns it takes
std::pair<std::string, int64_t> label(std::string_view text, int64_t width) {
  std::vector<std::pair<std::string, int>> chars;  // UTF-8 of each code point, its columns
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    const char32_t c = next_code_point(text, i);
    if (c < 0x20 || c == 0x7f)
      chars.push_back({" ", 1});
    else if (c == U'\uFFFD')  // also stands for malformed bytes
      chars.push_back({"\xef\xbf\xbd", 1});
    else
      chars.push_back({std::string(text.substr(begin, i - begin)), columns(c)});
  }
  int64_t total = 0;
  for (const auto& [utf8, w] : chars) total += w;
  std::string out;
  int64_t used = 0;
  const int64_t budget = total <= width ? width : width - 1;  // room for "…"
  for (const auto& [utf8, w] : chars) {
    if (used + w > budget) break;
    out += utf8;
    used += w;
  }
  if (total > width) {
    while (!out.empty() && out.back() == ' ') {  // "carrying…", not "carrying …"
      out.pop_back();
      --used;
    }
    out += "\xe2\x80\xa6";  // …
    ++used;
  }
  return {out, used};
}

void run_similarity(const SimilarityOptions& o) {
  const std::vector<std::string> texts = input_texts(o.input, "qkv similarity");
  const models::SentenceEncoder encoder = load_sentence_encoder(o.input);
  const Tensor e = encoder.encode(texts, o.input.batch_size);  // [N, D]
  // cos(e_i, e_j) = e_i·e_j / (‖e_i‖ ‖e_j‖): the norms are 1 when the model
  // normalises, but not every model does.
  const Tensor gram = matmul(e, e.transpose(0, 1));  // [N, N]
  const auto cosine = [&](int64_t i, int64_t j) {
    const double norms = std::sqrt(gram.at({i, i}) * gram.at({j, j}));
    return norms > 0 ? gram.at({i, j}) / norms : 0.0;
  };

  // "[12] " before each label; every number in a 7-column cell.
  const int64_t n = static_cast<int64_t>(texts.size());
  const int64_t index_width = static_cast<int64_t>(std::to_string(n).size()) + 3;
  std::vector<std::pair<std::string, int64_t>> labels;
  int64_t label_width = 0;
  for (const std::string& text : texts) {
    labels.push_back(label(text, o.label_width));
    label_width = std::max(label_width, labels.back().second);
  }
  const auto pad = [](int64_t spaces) { return std::string(std::max<int64_t>(spaces, 0), ' '); };
  std::string out = pad(index_width + label_width);
  for (int64_t j = 0; j < n; ++j) {
    const std::string head = "[" + std::to_string(j + 1) + "]";
    out += pad(8 - static_cast<int64_t>(head.size())) + head;
  }
  out += "\n";
  char cell[32];
  for (int64_t i = 0; i < n; ++i) {
    const std::string index = "[" + std::to_string(i + 1) + "]";
    out += index + pad(index_width - static_cast<int64_t>(index.size())) + labels[i].first +
           pad(label_width - labels[i].second);
    for (int64_t j = 0; j < n; ++j) {
      std::snprintf(cell, sizeof cell, "%8.3f", cosine(i, j));
      out += cell;
    }
    out += "\n";
  }
  std::cout << out << std::flush;
}

}  // namespace

Command add_similarity_command(CLI::App& parent) {
  return make_command(
      parent, "similarity", "Cosine similarity of every pair of texts, from sentence embeddings",
      run_similarity, [](CLI::App& app, SimilarityOptions& options) {
        add_sentence_input_options(app, options.input,
                                   "Texts to compare (default: -f, else one a line from stdin)");
        add_in_range(app, "--label-width", options.label_width, int64_t{4}, int64_t{1000},
                     "Columns for each text's label; longer texts are cut with \"…\"");
        app.footer(
            "Row i, column j holds cos(e_i, e_j) of the texts' embeddings (1 on the diagonal);\n"
            "texts of similar meaning score high, unrelated ones near 0.");
      });
}

}  // namespace qkv::cli
