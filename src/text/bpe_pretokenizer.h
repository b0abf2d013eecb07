// The pieces byte-level BPE cuts a text into before merging (see
// include/qkv/text/bpe_tokenizer.h), and GPT-2's byte <-> character table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::text::detail {

// The regex classes \p{L}, \p{N} and \s as Oniguruma (tokenizers' regex
// engine) sees them.
bool bpe_is_letter(char32_t cp);
bool bpe_is_number(char32_t cp);
bool bpe_is_space(char32_t cp);

// The pre-tokenizers of include/qkv/text/bpe_tokenizer.h.
enum class BpeSplit {
  kGpt2,    // GPT-2's regex
  kSmollm,  // every numeric character a piece of its own first (tokenizers'
            // Digits(individual_digits=true), whose "numeric" is Rust's
            // char::is_numeric: \p{N} and a few Unicode 17 digits), then GPT-2's
  kQwen2,   // Qwen2's regex
  kLlama3,  // Llama 3's regex
};

// The split named `name` (tokenizer.ggml.pre), or nullopt for another name.
std::optional<BpeSplit> bpe_split_named(std::string_view name);

// Appends to `pieces` the [begin, end) code-point ranges `split` cuts `text` into.
void bpe_pre_tokenize(std::u32string_view text, BpeSplit split,
                      std::vector<std::pair<size_t, size_t>>& pieces);

// GPT-2's bytes_to_unicode: printable bytes (! to ~, ¡ to ¬, ® to ÿ) stand
// for themselves, the 68 others for U+0100 onwards in byte order.
char32_t byte_to_char(uint8_t byte);
// The inverse; -1 for a character that stands for no byte.
int char_to_byte(char32_t cp);

}  // namespace qkv::text::detail
