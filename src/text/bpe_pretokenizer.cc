// The pre-tokenizer regexes, by hand on code points. GPT-2's:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Qwen2's (Llama 3's has \p{N}{1,3} for \p{N}):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// The alternatives are tried in order at each position, as the regex engine
// does; every character is a letter, a number, a space or "other", so each
// position starts a match.
#include "text/bpe_pretokenizer.h"

#include <utf8proc.h>

#include <array>

#include "text/basic_tokenizer.h"
#include "text/bpe_unicode_compat.h"
#include "text/unicode_categories.h"

namespace qkv::text::detail {

namespace {

enum class Class { kLetter, kNumber, kSpace, kOther };

Class classify(char32_t cp) {
  if (bpe_is_space(cp)) return Class::kSpace;
  if (bpe_is_letter(cp)) return Class::kLetter;
  if (bpe_is_number(cp)) return Class::kNumber;
  return Class::kOther;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd, lower case only) at i.
size_t contraction(std::u32string_view s, size_t i, size_t end) {
  if (s[i] != U'\'' || i + 1 >= end) return 0;
  const char32_t a = s[i + 1];
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = s[i + 2];
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

// Length of a contraction in any case ((?i:'s|'t|'re|'ve|'m|'ll|'d)) at i.
// Oniguruma folds case the Unicode way: U+017F (long s) matches 's' too.
size_t contraction_any_case(std::u32string_view s, size_t i, size_t end) {
  if (s[i] != U'\'' || i + 1 >= end) return 0;
  const auto lower = [](char32_t c) -> char32_t {
    if (c == 0x17F) return U's';
    return c >= U'A' && c <= U'Z' ? c + 0x20 : c;
  };
  const char32_t a = lower(s[i + 1]);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = lower(s[i + 2]);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

bool is_newline(char32_t cp) { return cp == U'\r' || cp == U'\n'; }

// Qwen2's regex (max_digits 1) or Llama 3's (max_digits 3).
void qwen2_split(std::u32string_view s, size_t begin, size_t end, size_t max_digits,
                 std::vector<std::pair<size_t, size_t>>& pieces) {
  size_t i = begin;
  const auto emit = [&](size_t k) {
    pieces.emplace_back(i, k);
    i = k;
  };
  while (i < end) {
    if (const size_t n = contraction_any_case(s, i, end)) {
      emit(i + n);
      continue;
    }
    const Class c = classify(s[i]);
    // "[^\r\n\p{L}\p{N}]?\p{L}+": letters, maybe after one character that is
    // none of those (a space, a tab, punctuation, ...).
    const bool lead = c != Class::kLetter && c != Class::kNumber && !is_newline(s[i]) &&
                      i + 1 < end && classify(s[i + 1]) == Class::kLetter;
    if (c == Class::kLetter || lead) {
      size_t k = i + (lead ? 2 : 1);
      while (k < end && classify(s[k]) == Class::kLetter) ++k;
      emit(k);
      continue;
    }
    if (c == Class::kNumber) {  // "\p{N}{1,max_digits}"
      size_t k = i + 1;
      while (k < end && k - i < max_digits && classify(s[k]) == Class::kNumber) ++k;
      emit(k);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    const size_t first =
        (s[i] == U' ' && i + 1 < end && classify(s[i + 1]) == Class::kOther) ? i + 1 : i;
    if (classify(s[first]) == Class::kOther) {
      size_t k = first + 1;
      while (k < end && classify(s[k]) == Class::kOther) ++k;
      while (k < end && is_newline(s[k])) ++k;
      emit(k);
      continue;
    }
    // A run of spaces: "\s*[\r\n]+" takes it up to its last line break;
    // without one, "\s+(?!\S)" leaves the last space for the word after it,
    // and "\s+" takes a single space followed by a word.
    size_t k = i, last_newline = end;
    for (; k < end && bpe_is_space(s[k]); ++k)
      if (is_newline(s[k])) last_newline = k;
    if (last_newline != end) {
      emit(last_newline + 1);
      continue;
    }
    if (k < end && k - i >= 2) --k;
    emit(k);
  }
}

void gpt2_split(std::u32string_view s, size_t begin, size_t end,
                std::vector<std::pair<size_t, size_t>>& pieces) {
  size_t i = begin;
  while (i < end) {
    if (const size_t n = contraction(s, i, end)) {
      pieces.emplace_back(i, i + n);
      i += n;
      continue;
    }
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a
    // run of one class that is not \s.
    const size_t first = (s[i] == U' ' && i + 1 < end) ? i + 1 : i;
    const Class c = classify(s[first]);
    if (c != Class::kSpace) {
      size_t k = first + 1;
      while (k < end && classify(s[k]) == c) ++k;
      pieces.emplace_back(i, k);
      i = k;
      continue;
    }
    // "\s+(?!\S)" leaves the last space of a run for the word after it;
    // "\s+" takes a single space followed by a word.
    size_t k = i + 1;
    while (k < end && bpe_is_space(s[k])) ++k;
    if (k < end && k - i >= 2) --k;
    pieces.emplace_back(i, k);
    i = k;
  }
}

}  // namespace

bool bpe_is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= U'a' && (cp | 0x20) <= U'z';
  return is_letter_category(category(cp)) || in_ranges(kOnigLetterExtra, cp);
}

bool bpe_is_number(char32_t cp) {
  if (cp < 0x80) return cp >= U'0' && cp <= U'9';
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return in_ranges(kOnigNumberExtra, cp);
  }
}

bool bpe_is_space(char32_t cp) { return is_whitespace(cp); }

std::optional<BpeSplit> bpe_split_named(std::string_view name) {
  if (name == "gpt2") return BpeSplit::kGpt2;
  if (name == "smollm") return BpeSplit::kSmollm;
  if (name == "qwen2") return BpeSplit::kQwen2;
  if (name == "llama-bpe") return BpeSplit::kLlama3;
  return std::nullopt;
}

void bpe_pre_tokenize(std::u32string_view text, BpeSplit split,
                      std::vector<std::pair<size_t, size_t>>& pieces) {
  switch (split) {
    case BpeSplit::kGpt2:
      gpt2_split(text, 0, text.size(), pieces);
      return;
    case BpeSplit::kQwen2:
      qwen2_split(text, 0, text.size(), 1, pieces);
      return;
    case BpeSplit::kLlama3:
      qwen2_split(text, 0, text.size(), 3, pieces);
      return;
    case BpeSplit::kSmollm:
      break;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!bpe_is_number(text[i]) && !in_ranges(kRustNumericExtra, text[i])) continue;
    gpt2_split(text, start, i, pieces);
    pieces.emplace_back(i, i + 1);
    start = i + 1;
  }
  gpt2_split(text, start, text.size(), pieces);
}

namespace {

struct ByteTable {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // characters U+0000 .. U+0143
};

const ByteTable& byte_table() {
  static const ByteTable table = [] {
    ByteTable t;
    t.to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t.to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      t.to_byte[t.to_char[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

}  // namespace

char32_t byte_to_char(uint8_t byte) { return byte_table().to_char[byte]; }

int char_to_byte(char32_t cp) {
  const ByteTable& t = byte_table();
  return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

}  // namespace qkv::text::detail
