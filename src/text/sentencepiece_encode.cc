// SentencePiece-style BPE (BpeVocabulary::model "llama"): no merge list, the
// scores of the merged tokens order the merges. transformers builds the merge
// list from the vocabulary (tokenization_utils_base.generate_merges: every
// split of every token into two tokens, sorted by the whole token's score,
// then the longer left part, then the longer right part, then token order);
// the same order is computed here pair by pair as the text is merged, so a
// 262,144-token vocabulary needs no list of millions of merges to load.
#include <cmath>
#include <queue>

#include "qkv/error.h"
#include "qkv/text/bpe_tokenizer.h"
#include "text/basic_tokenizer.h"
#include "text/bpe_symbols.h"
#include "text/utf8_lead.h"

namespace qkv::text {

namespace {

constexpr std::string_view kSpaceMark = "\u2581";  // "▁"

// Characters in valid UTF-8.
int32_t count_chars(std::string_view utf8) {
  int32_t n = 0;
  for (const char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Bytes of the character starting `utf8` (valid UTF-8).
size_t char_bytes(unsigned char lead) {
  const size_t n = detail::utf8_lead(lead).length;
  return n == 0 ? 1 : n;
}

}  // namespace

void BpeTokenizer::init_sentencepiece() {
  const auto& tokens = vocabulary_.tokens;
  const auto& scores = vocabulary_.scores;
  QKV_CHECK(vocabulary_.pre_tokenizer == "default", "BpeVocabulary.pre_tokenizer \"",
            vocabulary_.pre_tokenizer,
            "\" is not supported for the \"llama\" model; expected \"default\"");
  QKV_CHECK(vocabulary_.merges.empty(), "BpeVocabulary.merges has ", vocabulary_.merges.size(),
            " entries; the \"llama\" model merges by scores and takes none");
  QKV_CHECK(scores.size() == tokens.size(), "BpeVocabulary.scores has ", scores.size(),
            " entries, expected one per token (", tokens.size(), ") for the \"llama\" model");
  char_lengths_.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    QKV_CHECK(std::isfinite(scores[id]), "BpeVocabulary.scores[", id, "] = ", scores[id],
              " is not a finite number");
    char_lengths_[id] = count_chars(tokens[id]);
  }
  // Byte fallback looks tokens up as tokenizers spells them: "<0xE4>".
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = find_token(byte_token(static_cast<uint8_t>(b))).value_or(-1);
  }
}

std::string BpeTokenizer::sentencepiece_normalize(std::string_view utf8, bool at_start) const {
  std::u32string chars;
  detail::decode_utf8(utf8, chars);
  std::string out;
  out.reserve(utf8.size() + 3 * 8);
  // tokenizers' Metaspace(prepend_scheme="first"): only where the original
  // text starts, and not when it starts with "▁" (a space) already.
  if (vocabulary_.add_space_prefix && at_start && !chars.empty() && chars[0] != U' ' &&
      chars[0] != U'\u2581')
    out += kSpaceMark;
  for (const char32_t cp : chars) {
    if (cp == U' ') {
      out += kSpaceMark;
    } else {
      detail::append_utf8(cp, out);
    }
  }
  return out;
}

// [normalized] valid UTF-8 -> ids: one symbol per character (or per byte, or
// unk), then the best merge first until none is left; a heap of candidate
// pairs over a linked list of symbols, O(n log n) however long the text.
void BpeTokenizer::encode_sentencepiece(std::string_view normalized,
                                        std::vector<int32_t>& ids) const {
  detail::BpeSymbols symbols;
  symbols.reserve(normalized.size());
  bool after_unk = false;  // tokenizers' fuse_unk: a run of unknown characters is one unk
  for (size_t i = 0; i < normalized.size();) {
    const size_t n =
        std::min(char_bytes(static_cast<unsigned char>(normalized[i])), normalized.size() - i);
    const std::string_view ch = normalized.substr(i, n);
    i += n;
    if (const auto id = find_token(ch)) {
      symbols.push(*id);
      after_unk = false;
      continue;
    }
    bool bytes_known = true;
    for (const char c : ch) bytes_known = bytes_known && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (bytes_known) {
      for (const char c : ch) symbols.push(byte_ids_[static_cast<uint8_t>(c)]);
      after_unk = false;
    } else if (vocabulary_.unk && !after_unk) {
      symbols.push(*vocabulary_.unk);
      after_unk = true;
    }
  }

  struct Candidate {
    float score;  // of the merged token
    int32_t left_length, right_length;
    int32_t merged;
    int32_t left, right;  // symbol indices
    int32_t left_id, right_id;
  };
  // True when `a` goes after `b` (the heap's top is the best merge).
  const auto worse = [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score < b.score;
    if (a.left_length != b.left_length) return a.left_length < b.left_length;
    if (a.right_length != b.right_length) return a.right_length < b.right_length;
    if (a.merged != b.merged) return a.merged > b.merged;
    return a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  std::string joined;
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols.next(left);
    if (right < 0) return;
    const int32_t a = symbols.id(left), b = symbols.id(right);
    joined.assign(vocabulary_.tokens[a]).append(vocabulary_.tokens[b]);
    const auto found = find_token(joined);
    if (!found) return;
    const int32_t merged = *found;
    queue.push({vocabulary_.scores[merged], char_lengths_[a], char_lengths_[b], merged, left, right,
                a, b});
  };
  for (int32_t i = 0; i + 1 < symbols.size(); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Stale when either side has been merged away or into something else
    // since (a symbol's text only grows, so equal ids mean the same pair).
    if (!symbols.adjacent(c.left, c.right) || symbols.id(c.left) != c.left_id ||
        symbols.id(c.right) != c.right_id)
      continue;
    symbols.merge(c.left, c.right, c.merged);
    consider(symbols.prev(c.left));
    consider(c.left);
  }
  symbols.append_ids(ids);
}

}  // namespace qkv::text
