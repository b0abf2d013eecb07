// BERT's basic tokenization on code points: UTF-8 decoding, the normaliser
// (clean-up, CJK spacing, accent stripping, lower-casing, in tokenizers'
// BertNormalizer order) and the pre-tokeniser (split on whitespace, every
// punctuation character a word of its own).
#pragma once

#include <string>
#include <string_view>

namespace qkv::text::detail {

struct NormalizerOptions {
  bool clean_text = true;
  bool split_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
};

// Appends the code points of `text` to `out`; each maximal ill-formed
// subsequence (Unicode §3.9, as Python's errors="replace") becomes U+FFFD.
void decode_utf8(std::string_view text, std::u32string& out);
void append_utf8(char32_t cp, std::string& out);

// Appends the normalised form of `text` to `out`.
void normalize(std::u32string_view text, const NormalizerOptions& options, std::u32string& out);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t cp);
// ASCII punctuation (33-47, 58-64, 91-96, 123-126) or a P* category.
bool is_punctuation(char32_t cp);
// A character of the regex class \w (letters, marks, digits, connectors).
bool is_word_char(char32_t cp);

// Calls on_word(std::string_view utf8_word, int64_t code_points) for each
// word of `text`; `scratch` holds the word being built.
template <class OnWord>
void pre_tokenize(std::u32string_view text, std::string& scratch, OnWord&& on_word) {
  scratch.clear();
  int64_t chars = 0;
  const auto flush = [&] {
    if (chars > 0) on_word(std::string_view(scratch), chars);
    scratch.clear();
    chars = 0;
  };
  for (char32_t cp : text) {
    if (is_whitespace(cp)) {
      flush();
    } else if (is_punctuation(cp)) {
      flush();
      append_utf8(cp, scratch);
      chars = 1;
      flush();
    } else {
      append_utf8(cp, scratch);
      ++chars;
    }
  }
  flush();
}

}  // namespace qkv::text::detail
