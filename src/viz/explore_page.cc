// viz::explore_json and viz::explore_html: the maps as the page's JSON, and the
// page (src/viz/explore_page.html, embedded at build time) with that JSON inside.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "qkv/error.h"
#include "qkv/viz/explore.h"

namespace qkv::viz {

namespace detail {
extern const char* const kExplorePage;  // generated: explore_page_text.cc.in
}  // namespace detail

namespace {

using Json = nlohmann::json;

// The double whose shortest decimal is the float's shortest decimal: the JSON
// is short ("0.1", not "0.10000000149011612") and reads back as the same float.
double short_decimal(float value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text - 1, value);
  QKV_CHECK(error == std::errc(), "explore_json: cannot format ", value);
  *end = '\0';
  return std::strtod(text, nullptr);
}

// A [N0, N1, ..., Nk] float32 tensor as nested arrays.
Json nested(const float* data, std::span<const int64_t> shape) {
  Json out = Json::array();
  if (shape.size() == 1) {
    for (int64_t i = 0; i < shape[0]; ++i) out.push_back(short_decimal(data[i]));
    return out;
  }
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t i = 0; i < shape[0]; ++i) out.push_back(nested(data + i * inner, shape.subspan(1)));
  return out;
}

Json nested(const Tensor& t) {
  const Tensor c = t.contiguous();
  return nested(c.data<float>(), std::span<const int64_t>(c.shape().data(), c.shape().size()));
}

// Each head's mask as rows of '0'/'1' (1: the query may read the key), the
// distinct masks listed once: {"masks": [[row, ...], ...], "mask_of": [[index per head] per
// layer]}.
void add_masks(const AttentionMaps& maps, Json& out) {
  const int64_t N = maps.layers(), H = maps.heads(), L = maps.length();
  const int64_t S = maps.allowed.size(3);
  const Tensor allowed = maps.allowed.contiguous();
  const bool* a = allowed.data<bool>();
  std::map<std::string, int64_t> index;
  Json masks = Json::array(), mask_of = Json::array();
  for (int64_t l = 0; l < N; ++l) {
    Json heads = Json::array();
    for (int64_t h = 0; h < H; ++h) {
      const bool* m = a + (l * H + h) * L * S;
      const std::string key(reinterpret_cast<const char*>(m), static_cast<size_t>(L * S));
      auto [it, added] = index.emplace(key, static_cast<int64_t>(masks.size()));
      if (added) {
        Json rows = Json::array();
        for (int64_t i = 0; i < L; ++i) {
          std::string row(static_cast<size_t>(S), '0');
          for (int64_t j = 0; j < S; ++j)
            if (m[i * S + j]) row[static_cast<size_t>(j)] = '1';
          rows.push_back(row);
        }
        masks.push_back(rows);
      }
      heads.push_back(it->second);
    }
    mask_of.push_back(heads);
  }
  out["masks"] = masks;
  out["mask_of"] = mask_of;
}

// JSON text that is safe inside <script>: no "</" to end the element early.
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    out += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') out += '\\';
  }
  return out;
}

// The page with each placeholder (once in it) replaced by its value; values
// are not searched, whatever text they hold.
std::string fill(const std::string& page,
                 std::vector<std::pair<std::string, std::string>> placeholders) {
  std::vector<std::pair<size_t, size_t>> at;  // (position in page, index)
  for (size_t i = 0; i < placeholders.size(); ++i) {
    const size_t pos = page.find(placeholders[i].first);
    QKV_CHECK(pos != std::string::npos, "explore_html: the page has no ", placeholders[i].first);
    at.push_back({pos, i});
  }
  std::sort(at.begin(), at.end());
  std::string out;
  size_t done = 0;
  for (const auto& [pos, i] : at) {
    out.append(page, done, pos - done);
    out += placeholders[i].second;
    done = pos + placeholders[i].first.size();
  }
  out.append(page, done);
  return out;
}

}  // namespace

std::string explore_json(const AttentionMaps& maps) {
  const char* fn = "explore_json";
  QKV_CHECK(maps.weights.defined() && maps.weights.dim() == 4, fn,
            ": weights must be [layers, H, L, S]");
  const int64_t S = maps.weights.size(3);
  QKV_CHECK(maps.scores.shape() == maps.weights.shape() &&
                maps.allowed.shape() == maps.weights.shape() && maps.values.dim() == 4 &&
                maps.values.size(2) == S && static_cast<int64_t>(maps.tokens.size()) == S &&
                static_cast<int64_t>(maps.segments.size()) == S &&
                (maps.ids.empty() || static_cast<int64_t>(maps.ids.size()) == S) &&
                static_cast<int64_t>(maps.scales.size()) == maps.layers(),
            fn, ": the maps do not fit together: weights ", shape_str(maps.weights.shape()),
            ", scores ", shape_str(maps.scores.shape()), ", allowed ",
            shape_str(maps.allowed.shape()), ", values ", shape_str(maps.values.shape()), ", ",
            maps.tokens.size(), " tokens, ", maps.segments.size(), " segments, ",
            maps.scales.size(), " scales");
  QKV_CHECK(maps.length() == S, fn,
            ": the page draws self-attention (L = S), got L = ", maps.length(), ", S = ", S);
  Json j;
  j["format"] = "qkv-explore-1";
  j["model"] = maps.model;
  j["architecture"] = maps.architecture;
  j["text"] = maps.text;
  j["text_b"] = maps.text_b;
  j["ids"] = maps.ids;
  j["tokens"] = maps.tokens;
  j["segments"] = maps.segments;
  j["layers"] = maps.layers();
  j["heads"] = maps.heads();
  j["kv_heads"] = maps.kv_heads();
  j["head_dim"] = maps.values.size(3);
  j["scales"] = maps.scales;
  j["weights"] = nested(maps.weights);
  j["scores"] = nested(maps.scores);
  j["values"] = nested(maps.values);
  add_masks(maps, j);
  // Tokens may hold partial UTF-8 (a byte-level BPE piece): shown as U+FFFD.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string explore_html(const AttentionMaps& maps, const PageOptions& options) {
  return fill(detail::kExplorePage,
              {{"__QKV_LIVE_ENDPOINT__", script_safe(Json(options.live_endpoint).dump())},
               {"__QKV_DATA__", script_safe(explore_json(maps))}});
}

}  // namespace qkv::viz
