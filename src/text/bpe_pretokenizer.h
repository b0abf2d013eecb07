// The pieces byte-level BPE cuts a text into before merging (see
// include/qkv/text/bpe_tokenizer.h), and GPT-2's byte <-> character table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::text::detail {

// The regex classes \p{L}, \p{N} and \s as Oniguruma (tokenizers' regex
// engine) sees them.
bool bpe_is_letter(char32_t cp);
bool bpe_is_number(char32_t cp);
bool bpe_is_space(char32_t cp);

// Appends to `pieces` the [begin, end) code-point ranges of GPT-2's regex
// over `text`; with split_digits, every numeric character is a piece of its
// own first (tokenizers' Digits(individual_digits=true), whose "numeric" is
// Rust's char::is_numeric: \p{N} and a few Unicode 17 digits).
void bpe_pre_tokenize(std::u32string_view text, bool split_digits,
                      std::vector<std::pair<size_t, size_t>>& pieces);

// GPT-2's bytes_to_unicode: printable bytes (! to ~, ¡ to ¬, ® to ÿ) stand
// for themselves, the 68 others for U+0100 onwards in byte order.
char32_t byte_to_char(uint8_t byte);
// The inverse; -1 for a character that stands for no byte.
int char_to_byte(char32_t cp);

}  // namespace qkv::text::detail
