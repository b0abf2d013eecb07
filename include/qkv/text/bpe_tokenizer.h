// BPE tokenizers of GGUF files, by tokenizer.ggml.model:
//   "gpt2"   byte-level BPE (SmolLM2, Qwen 2/3, Llama 3, GPT-2, ...);
//   "llama"  SentencePiece-style BPE over characters (Gemma, Llama 2,
//            Mistral, ...): token scores instead of merges, "▁" for spaces,
//            byte fallback "<0xNN>".
// Both give the ids of transformers' tokenizer built from the same GGUF file
// (AutoTokenizer.from_pretrained(dir, gguf_file=...)), which
// python/tests/test_gguf_tokenizers.py and test_bpe_parity.py check.
//
// Both first cut control and user-defined tokens (<|im_start|>, <bos>, ...)
// out of the text whole, leftmost-longest.
//
// "gpt2": the rest is split by the pre-tokenizer, each piece's UTF-8 bytes
// become the printable characters of GPT-2's bytes_to_unicode table, and the
// merges are applied by rank (lowest first, leftmost first on ties).
//
// Pre-tokenizers of "gpt2" (BpeVocabulary::pre_tokenizer, GGUF tokenizer.ggml.pre):
//   "gpt2"    GPT-2's regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//             ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+  (tokenizers' ByteLevel with
//             use_regex). This is what transformers builds from a GGUF file
//             whose pre-tokenizer is "smollm".
//   "smollm"  every numeric character cut out on its own first, then the
//             GPT-2 regex on the rest (tokenizers' Digits(individual_digits)
//             + ByteLevel: SmolLM2's own tokenizer.json, and llama.cpp). With
//             SmolLM2's vocabulary (no token joins a digit to anything) it
//             differs from "gpt2" only where whitespace precedes a digit:
//             "x  1" is "x" "ĠĠ" "1" here, "x" "Ġ" "Ġ" "1" there.
//   "qwen2"   Qwen2's regex  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
//             \p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   "llama-bpe"  Llama 3's: the same with \p{N}{1,3} (numbers in threes).
// Any other name is rejected.
//
// A byte that has no token of its own is dropped, as tokenizers and llama.cpp
// do (unk is not used): SmolLM2 has none for 21 bytes that its training text
// never held (0x04 0x06 0x13 0x14 0x16 0x1D 0xC0 0xC1 0xF1 0xF2 0xF5-0xFF).
//
// "llama" (pre_tokenizer "default"), as transformers' LlamaTokenizer and
// GemmaTokenizer run it:
//   - spaces become "▁"; with add_space_prefix, a "▁" goes before the text
//     when it does not start with one (a space) already -- only before the
//     text's start, not after a special token (tokenizers' Metaspace with
//     prepend_scheme "first"; llama.cpp adds one after special tokens too);
//   - each character is its token, or else the "<0xNN>" tokens of its UTF-8
//     bytes, or else unk (a run of them fused into one), or else dropped
//     (transformers' LlamaTokenizer, whose BPE has no unk token, drops it
//     even when there is an unk: the one difference, python/tests/
//     test_gguf_tokenizers.py shows it);
//   - adjacent pieces whose concatenation is a token merge, best first: the
//     higher score of the merged token, then the longer left piece, then the
//     longer right piece (in characters), then the lower merged id, then the
//     leftmost (the merge order transformers derives from the scores);
//   - decoding turns "▁" back into spaces, joins runs of byte tokens (a run
//     that is not valid UTF-8 gives one U+FFFD per byte, as tokenizers'
//     ByteFallback), and with add_space_prefix drops one leading space.
//
// Invalid UTF-8 input never throws: each maximal ill-formed subsequence
// becomes U+FFFD before tokenization (as Python's errors="replace", which is
// what a Hugging Face tokenizer sees for such bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/text/token_index.h"

namespace qkv::text {

// GGUF token types (tokenizer.ggml.token_type).
enum class BpeTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: matched whole, skipped by decode(skip_special)
  kUserDefined = 4,  // matched whole, kept by decode(skip_special)
  kUnused = 5,
  kByte = 6,  // "<0xAB>": decodes to that byte
};

// A vocabulary as plain data (the GGUF tokenizer.ggml.* fields).
struct BpeVocabulary {
  std::string model = "gpt2";          // "gpt2" or "llama", see above
  std::vector<std::string> tokens;     // id -> text ("gpt2": byte-level characters)
  std::vector<std::string> merges;     // "gpt2": "a b" pairs in rank order
  std::vector<float> scores;           // "llama": one per token, higher merges first
  std::vector<int32_t> token_types;    // BpeTokenType per token; empty = all normal
  std::string pre_tokenizer = "gpt2";  // see above ("llama": "default")
  bool add_space_prefix = false;       // "llama": "▁" before the text, see above
  std::optional<int32_t> bos, eos, unk, pad;
  bool add_bos = false;  // encode(add_special) puts bos first
  bool add_eos = false;  // encode(add_special) puts eos last
};

// Const methods may be called from several threads at once.
class BpeTokenizer {
 public:
  // Checks the vocabulary, throwing qkv::Error (kValue) naming the field, the
  // index and what is wrong: token_types of another length or an unknown
  // type, duplicate tokens, empty control/user-defined tokens, a merge that is
  // not "a b" or whose a, b or ab is not a token, duplicate merges, special
  // ids out of range, an unknown model or pre-tokenizer, "llama" with merges
  // or without one finite score per token, or "gpt2" with scores.
  explicit BpeTokenizer(BpeVocabulary vocabulary);

  // Token ids of `utf8`: bos/eos around them when add_special and the
  // vocabulary says so; control and user-defined tokens written in the text
  // become their ids when parse_special (otherwise they are plain text).
  std::vector<int32_t> encode(std::string_view utf8, bool add_special = true,
                              bool parse_special = true) const;
  // The text of `ids` (control tokens left out when skip_special). "gpt2":
  // bytes that do not form valid UTF-8 become U+FFFD, maximal subpart by
  // subpart (as tokenizers' decode); "llama": see above. Throws qkv::Error
  // naming the position of an id outside [0, size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The pieces the pre-tokenizer cuts plain text into (no special tokens),
  // in UTF-8; encode merges within each piece only. "llama": the text with
  // "▁" for spaces (and its prefix), one piece.
  std::vector<std::string> pre_tokenize(std::string_view utf8) const;
  // The raw bytes of one token: possibly part of a UTF-8 character (join
  // several, or use BpeStreamDecoder); "llama": "▁" as a space. Throws for
  // an id out of range. Valid as long as the tokenizer.
  std::string_view token_to_piece(int32_t id) const;

  int32_t size() const { return static_cast<int32_t>(vocabulary_.tokens.size()); }
  const std::string& token(int32_t id) const;                  // the vocabulary's text
  std::optional<int32_t> id_of(std::string_view token) const;  // exact token text
  BpeTokenType token_type(int32_t id) const;
  std::optional<int32_t> bos() const { return vocabulary_.bos; }
  std::optional<int32_t> eos() const { return vocabulary_.eos; }
  std::optional<int32_t> unk() const { return vocabulary_.unk; }
  std::optional<int32_t> pad() const { return vocabulary_.pad; }
  // The vocabulary's fields (its merges are kept as id pairs, not as text).
  const std::string& model() const { return vocabulary_.model; }
  const std::string& pre_tokenizer() const { return vocabulary_.pre_tokenizer; }
  bool add_space_prefix() const { return vocabulary_.add_space_prefix; }
  bool is_sentencepiece() const { return sentencepiece_; }
  // "llama": whether the token is "<0xNN>" (decoded as its byte, see above).
  bool is_byte_token(int32_t id) const;

  // Bytes <-> GPT-2's printable characters (bytes_to_unicode).
  static std::string bytes_to_unicode(std::string_view bytes);
  // "<0xE4>": the byte-fallback token of `byte`, spelled as tokenizers does.
  static std::string byte_token(uint8_t byte);

 private:
  struct Special;  // trie of the control/user-defined tokens
  struct Cache;    // piece -> ids, shared by copies

  void encode_text(std::string_view utf8, bool at_start, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& ids) const;
  // "llama" (src/text/sentencepiece_encode.cc): the checks and tables, and
  // the merges over one text whose spaces are "▁" already.
  void init_sentencepiece();
  std::string sentencepiece_normalize(std::string_view utf8, bool at_start) const;
  void encode_sentencepiece(std::string_view normalized, std::vector<int32_t>& ids) const;

  void add_piece(std::string_view bytes);
  std::optional<int32_t> find_token(std::string_view text) const;

  BpeVocabulary vocabulary_;  // merges emptied once merges_ holds them
  TokenIndex ids_;            // token text -> id
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  int32_t byte_ids_[256] = {};       // token of each single byte, -1 if none
  // The decoded bytes of every token, end to end: token i's are
  // [piece_ends_[i - 1], piece_ends_[i]) (one string, not one per token).
  std::string piece_bytes_;
  std::vector<uint32_t> piece_ends_;
  std::shared_ptr<const Special> special_;
  std::shared_ptr<Cache> cache_;
  int pre_tokenizer_ = 0;  // detail::BpeSplit
  bool sentencepiece_ = false;
  // "llama": per token, its length in characters (a merge-order key).
  std::vector<int32_t> char_lengths_;
};

// Turns a stream of token ids into text as it arrives (for `qkv chat`):
// bytes of a UTF-8 character split across tokens are held back until the
// character is complete ("llama": a run of byte tokens is held until a token
// that is not one ends it). The concatenation of every push() and finish()
// equals tokenizer.decode(all ids). The tokenizer must outlive it.
class BpeStreamDecoder {
 public:
  explicit BpeStreamDecoder(const BpeTokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  // The text that `id` completes (maybe empty). Throws for an id out of range.
  std::string push(int32_t id);
  // What is still held back (an incomplete character becomes U+FFFD), and
  // starts over.
  std::string finish();

 private:
  std::string strip_prefix_space(std::string text);

  const BpeTokenizer* tokenizer_;
  bool skip_special_;
  bool started_ = false;  // "llama": some text went out (its leading space dropped)
  std::string pending_;   // bytes of an incomplete character or byte-token run
};

}  // namespace qkv::text
