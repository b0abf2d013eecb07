// utf8proc's general category of a code point, and the letters (L*), which
// both pre-tokenizers' character classes start from: BERT's \w
// (basic_tokenizer.cc) and GPT-2's \p{L} (bpe_pretokenizer.cc).
#pragma once

#include <utf8proc.h>

namespace qkv::text::detail {

inline utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

// Lu, Ll, Lt, Lm or Lo.
inline bool is_letter_category(utf8proc_category_t c) {
  switch (c) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

}  // namespace qkv::text::detail
