// Writes the seed corpora of fuzz/corpus/<fuzzer>/: small valid files made
// with the library's own writers, and hostile ones (deep nesting, huge
// numbers, truncated files). Run once after a format change, then commit:
//   cmake --build build-fuzz --target fuzz_make_seeds
//   build-fuzz/fuzz_make_seeds fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/io/char_vocabulary.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder_model_file.h"
#include "qkv/nn/decoder_model.h"
// The tiny GGUF writer of the tests (qkv writes no GGUF files itself).
#include "../tests/gguf_writer.h"

namespace fs = std::filesystem;
using namespace qkv;
using namespace std::string_literals;

namespace {

fs::path g_root;

void write(const std::string& fuzzer, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_root / fuzzer);
  std::ofstream(g_root / fuzzer / name, std::ios::binary) << bytes;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string to_string(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A safetensors file: 8-byte little-endian header length, header, data.
std::string safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }
std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  return s + "1" + std::string(depth, '}');
}

void safetensors_seeds() {
  Generator gen(1);
  const auto valid = to_string(
      io::serialize_safetensors({{"w", Tensor::randn({2, 3}, gen)},
                                 {"b", Tensor::randn({3}, gen, DType::kFloat64)},
                                 {"m", Tensor::from_bools({2, 2}, {true, false, false, true})},
                                 {"s", Tensor::randn({}, gen)},
                                 {"e", Tensor::zeros({0, 4})}},
                                {{"format", "pt"}}));
  write("safetensors", "valid.safetensors", valid);
  write("safetensors", "dtypes.safetensors",
        safetensors(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                    R"("bf":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},)"
                    R"("i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
                    R"("u":{"dtype":"U8","shape":[2,1],"data_offsets":[16,18]},)"
                    R"("f8":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[18,20]},)"
                    R"("c":{"dtype":"C64","shape":[1],"data_offsets":[20,28]}})",
                    "\x00\x3c\x00\xc0\x80\x3f\x00\x40"
                    "\xff\xff\xff\xff\xff\xff\xff\x7f"
                    "\x01\xfe\x38\xb8\x00\x00\x80\x3f\x00\x00\x00\x00"s));
  write("safetensors", "truncated.safetensors", valid.substr(0, valid.size() / 2));
  write("safetensors", "huge_header_length.safetensors", std::string(8, '\xff') + "{}");
  write("safetensors", "deep_nesting.safetensors", safetensors(nested(100000), ""));
  write("safetensors", "deep_metadata.safetensors",
        safetensors("{\"__metadata__\":" + nested_objects(30000) + "}", ""));
  write("safetensors", "huge_numbers.safetensors",
        safetensors(R"({"a":{"dtype":"F32","shape":[1e400,18446744073709551615],)"
                    R"("data_offsets":[0,18446744073709551616]}})",
                    ""));
  write("safetensors", "size_overflow.safetensors",
        safetensors(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],)"
                    R"("data_offsets":[0,0]}})",
                    ""));
}

void checkpoint_seeds(const fs::path& tmp) {
  Generator gen(2);
  io::Checkpoint c;
  c.model = {{"linear.weight", Tensor::randn({2, 2}, gen)}, {"linear.bias", Tensor::zeros({2})}};
  c.optimizer = {{"step", Tensor::ones({})}, {"exp_avg.0", Tensor::zeros({2, 2})}};
  c.step = 7;
  c.metadata = {{"seed", "42"}};
  io::save_checkpoint(tmp / "c.safetensors", c);
  const std::string valid = read(tmp / "c.safetensors");
  write("checkpoint", "valid.safetensors", valid);
  write("checkpoint", "truncated.safetensors", valid.substr(0, valid.size() - 5));
  write("checkpoint", "huge_step.safetensors",
        to_string(io::serialize_safetensors({}, {{"qkv.format", "checkpoint"},
                                                 {"qkv.format_version", "1"},
                                                 {"qkv.step", "99999999999999999999999"}})));
  write("checkpoint", "deep_nesting.safetensors", safetensors(nested(100000), ""));
}

void decoder_model_seeds(const fs::path& tmp) {
  nn::DecoderModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.num_layers = 1;
  c.num_heads = 2;
  c.max_seq_len = 8;
  Generator gen(3);
  models::save_decoder_model(nn::DecoderModel(c, &gen), tmp / "m.safetensors");
  const std::string valid = read(tmp / "m.safetensors");
  write("decoder_model_file", "rope_rmsnorm_swiglu.safetensors", valid);
  nn::DecoderModelConfig d = c;
  d.positions = nn::PositionKind::kLearned;
  d.norm = nn::NormKind::kLayerNorm;
  d.ffn = nn::FeedForwardKind::kGelu;
  d.tie_embeddings = false;
  d.bias = true;
  d.num_kv_heads = 1;
  models::save_decoder_model(nn::DecoderModel(d, &gen), tmp / "m2.safetensors");
  write("decoder_model_file", "learned_layernorm_gelu.safetensors", read(tmp / "m2.safetensors"));
  write("decoder_model_file", "truncated.safetensors", valid.substr(0, valid.size() / 3));
  // Configs that ask for enormous models, with no tensors at all.
  for (const auto& [name, json] : std::map<std::string, std::string>{
           {"huge_layers", R"({"num_layers":1000000000000})"},
           {"huge_vocab", R"({"vocab_size":4611686018427387904,"d_model":8,"num_heads":2})"},
           {"huge_seq_len", R"({"max_seq_len":1000000000000,"positions":"learned"})"},
           {"big_number", R"({"rope_base":1e400})"},
           {"deep_nesting", nested(100000)}})
    write("decoder_model_file", name + ".safetensors",
          to_string(io::serialize_safetensors({}, {{qkv::models::kDecoderConfigKey, json}})));
}

// A WordPiece tokenizer.json shaped like all-MiniLM-L6-v2's, with a tiny vocabulary.
std::string small_tokenizer(const std::string& normalizer_lowercase = "true",
                            const std::string& truncation = "null",
                            const std::string& padding = "null") {
  std::vector<std::string> vocab = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",          "a",
      "hello", "world", "un",    "##aff", "##able", "##s",          "##ing",
      "caf",   "##e",   ",",     ".",     "!",      "\xe4\xb8\xad", "\xe6\x96\x87"};
  for (char ch = 'a'; ch <= 'z'; ++ch) {
    vocab.push_back(std::string(1, ch));
    vocab.push_back("##" + std::string(1, ch));
  }
  std::string v;
  for (size_t i = 0; i < vocab.size(); ++i)
    v += (i ? ",\n    \"" : "\n    \"") + vocab[i] + "\": " + std::to_string(i);
  auto added = [](const char* content, int id, const char* extra = "false") {
    return std::string("{\"id\": ") + std::to_string(id) + ", \"content\": \"" + content +
           "\", \"single_word\": false, \"lstrip\": " + extra +
           ", \"rstrip\": false, "
           "\"normalized\": false, \"special\": true}";
  };
  return "{\n  \"version\": \"1.0\",\n  \"truncation\": " + truncation +
         ",\n  \"padding\": " + padding + ",\n  \"added_tokens\": [" + added("[PAD]", 0) + ", " +
         added("[UNK]", 1) + ", " + added("[CLS]", 2) + ", " + added("[SEP]", 3) + ", " +
         added("[MASK]", 4, "true") +
         "],\n  \"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, "
         "\"handle_chinese_chars\": true, \"strip_accents\": null, \"lowercase\": " +
         normalizer_lowercase +
         "},\n  \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},\n"
         "  \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
         "{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, "
         "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
         "{\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], "
         "\"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [2], \"tokens\": "
         "[\"[CLS]\"]}, "
         "\"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [3], \"tokens\": [\"[SEP]\"]}}},\n"
         "  \"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true},\n"
         "  \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", "
         "\"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": 100, "
         "\"vocab\": {" +
         v + "\n  }}\n}\n";
}

void tokenizer_seeds() {
  const std::string small = small_tokenizer();
  write("tokenizer_json", "small.json", small);
  write("tokenizer_json", "cased_truncated_padded.json",
        small_tokenizer(
            "false",
            R"({"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Left"})",
            R"({"strategy": {"Fixed": 12}, "direction": "Left", "pad_to_multiple_of": 4,)"
            R"( "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"})"));
  write("tokenizer_json", "truncated.json", small.substr(0, small.size() / 2));
  write("tokenizer_json", "deep_nesting.json", nested(100000));
  write("tokenizer_json", "deep_nesting_in_field.json",
        "{\"version\": \"1.0\", \"truncation\": " + nested_objects(30000) + "}");
  write("tokenizer_json", "huge_numbers.json",
        small_tokenizer("true", R"({"max_length": 1e400, "strategy": "LongestFirst", "stride": 0})",
                        R"({"strategy": {"Fixed": 18446744073709551615}, "direction": "Right",)"
                        R"( "pad_to_multiple_of": 9223372036854775807, "pad_id": 0,)"
                        R"( "pad_type_id": 0, "pad_token": "[PAD]"})"));
}

void text_seeds() {
  const std::map<std::string, std::string> texts = {
      {"english.txt", "Hello, world! The unaffable cafes.\nA second line."},
      {"accents_cjk.txt",
       "Caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 e\xcc\x81"},
      {"specials.txt", "[CLS] hello [SEP] [MASK]world [UNK][PAD]"},
      {"invalid_utf8.txt", "a\xff\xfe b\xc3 \xe4\xb8 \xf0\x9f\x98 \xed\xa0\x80 z\0x"s},
      {"long_word.txt", std::string(150, 'x') + " " + std::string(60, 'a') + "##b"},
      {"controls.txt", "\t\r\x01\x7f\xc2\xa0\xe2\x80\x8b | \xe3\x80\x80 end"s}};
  for (const auto& [name, text] : texts) write("tokenize", name, text);
}

void char_vocabulary_seeds() {
  write("char_vocabulary", "list.txt", "[\"a\",\"b\",\"ab\",\"\xc3\xa9\"]\0abba\xc3\xa9"s);
  write("char_vocabulary", "bytes.txt", "\"bytes\"\0hello\xff"s);
  write("char_vocabulary", "from_text.txt", io::CharVocabulary::from_text("hello").to_json());
  write("char_vocabulary", "text_only.txt", "Hello, w\xc3\xb6rld \xe4\xb8\xad");
  write("char_vocabulary", "invalid_utf8.txt", "[\"\xff\"]");
  write("char_vocabulary", "deep_nesting.txt", nested(100000));
  write("char_vocabulary", "huge_number.txt", "[1e400]");
}

void config_seeds() {
  write("bert_config", "minilm.json", R"({
  "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
  "hidden_size": 384, "initializer_range": 0.02, "intermediate_size": 1536,
  "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
  "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
  "position_embedding_type": "absolute", "transformers_version": "4.8.2",
  "type_vocab_size": 2, "use_cache": true, "vocab_size": 30522
})");
  write("bert_config", "huge_layers.json",
        R"({"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 1e12,)"
        R"( "num_attention_heads": 12, "intermediate_size": 1536})");
  write("bert_config", "huge_numbers.json",
        R"({"vocab_size": 18446744073709551616, "hidden_size": 1e400, "num_hidden_layers": 2,)"
        R"( "num_attention_heads": 12, "intermediate_size": 1536, "layer_norm_eps": 1e-400})");
  write("bert_config", "deep_nesting.json", nested(100000));
  write("bert_config", "deep_nesting_in_field.json",
        "{\"vocab_size\": 10, \"architectures\": " + nested(100000) + "}");
  nn::DecoderModelConfig c;
  write("decoder_config", "default.json", qkv::models::decoder_config_to_json(c));
  c.positions = nn::PositionKind::kSinusoidal;
  c.norm = nn::NormKind::kLayerNorm;
  c.ffn = nn::FeedForwardKind::kGelu;
  c.rope_style = nn::RopeStyle::kInterleaved;
  c.dtype = DType::kFloat64;
  c.num_kv_heads = 2;
  write("decoder_config", "variant.json", qkv::models::decoder_config_to_json(c));
  write("decoder_config", "huge_layers.json", R"({"num_layers": 1000000000000, "d_model": 4096})");
  write("decoder_config", "huge_numbers.json", R"({"rope_base": 1e400, "norm_eps": -1e-400})");
  write("decoder_config", "deep_nesting.json", nested(100000));
}

// One tensor of each block type the kernels take (ggml type ids 2, 3, 6, 7, 8, 12, 13, 14, 20;
// 2 rows of 2 blocks, the fp16 scales set to 1.5, 0.25 or −0.75, the other bytes a
// pattern) and one of a type they do not (Q2_K), so that the fuzzer starts from every id.
void gguf_block_type_seeds() {
  using qkv_test::le;
  struct Type {
    const char* name;
    uint32_t id, block, bytes;
    std::vector<int> scales;  // byte offsets of the fp16 scales
  };
  const Type types[] = {{"q4_0", 2, 32, 18, {0}},       {"q4_1", 3, 32, 20, {0, 2}},
                        {"q5_0", 6, 32, 22, {0}},       {"q5_1", 7, 32, 24, {0, 2}},
                        {"q8_0", 8, 32, 34, {0}},       {"q4_k", 12, 256, 144, {0, 2}},
                        {"q5_k", 13, 256, 176, {0, 2}}, {"q6_k", 14, 256, 210, {208}},
                        {"iq4_nl", 20, 32, 18, {0}},    {"q2_k", 10, 256, 84, {80, 82}}};
  const uint16_t halves[3] = {0x3e00, 0x3400, 0xba00};  // 1.5, 0.25, -0.75
  qkv_test::GgufWriter w;
  w.str("general.architecture", "llama");
  int n = 0;
  for (const Type& t : types) {
    std::string data;
    for (int b = 0; b < 4; ++b) {
      std::string block(t.bytes, '\0');
      for (uint32_t i = 0; i < t.bytes; ++i) block[i] = static_cast<char>((i * 37 + b * 11) & 0xff);
      for (int offset : t.scales) block.replace(offset, 2, le<uint16_t>(halves[n++ % 3]));
      data += block;
    }
    w.tensor(t.name, {2 * uint64_t{t.block}, 2}, t.id, data);
  }
  write("gguf", "block_types.gguf", w.build());
}

// GGUF files shaped like a small llama model (metadata of every kind, tensors of the plain
// types, Q4_1 and Q8_0), at versions 2 and 3 and other alignments, and hostile ones.
void gguf_seeds() {
  using qkv_test::GgufWriter;
  using qkv_test::le;
  auto llama = [](uint32_t version, uint32_t alignment) {
    GgufWriter w;
    w.version = version;
    w.alignment = alignment;
    w.str("general.architecture", "llama")
        .u32("general.alignment", alignment)
        .u32("llama.block_count", 2)
        .u64("llama.context_length", 2048)
        .f32("llama.rope.freq_base", 10000.0f)
        .f64("f64", -0.5)
        .i64("i64", -7)
        .boolean("tokenizer.ggml.add_bos_token", false)
        .kv("u8", qkv_test::kU8, le<uint8_t>(255))
        .kv("i16", qkv_test::kI16, le<int16_t>(-3))
        .str("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0" "b", "<|im_end|>"})
        .strings("tokenizer.ggml.merges", {"a b", "\xc4\xa0 b"})
        .numbers<int32_t>("tokenizer.ggml.token_type", qkv_test::kI32, {1, 1, 1, 3})
        .numbers<float>("tokenizer.ggml.scores", qkv_test::kF32, {0.f, -1.f, -2.f, 0.f})
        .numbers<uint64_t>("u64s", qkv_test::kU64, {0, ~uint64_t{0}})
        .array("bools", qkv_test::kBool, 2, "\x01\x00"s);
    std::string f32;
    for (int i = 0; i < 6; ++i) f32 += le(0.25f * static_cast<float>(i));
    w.tensor("output_norm.weight", {2, 3}, 0, f32)
        .tensor("h", {2}, 1, le<uint16_t>(0x3c00) + le<uint16_t>(0x7c00))
        .tensor("bf", {2}, 30, le<uint16_t>(0x3f80) + le<uint16_t>(0xff81))
        .tensor("blk.0.attn_q.weight", {32, 2}, 3, std::string(40, '\x11'))
        .tensor("token_embd.weight", {32, 1}, 8, std::string(34, '\x22'))
        .tensor("ids", {3}, 26, le<int32_t>(-1) + le<int32_t>(0) + le<int32_t>(7))
        .tensor("d", {1, 1, 1, 1}, 28, le(1e300))
        .tensor("big", {1}, 27, le<int64_t>(INT64_MAX))
        .tensor("empty", {0, 4}, 0, "");
    return w;
  };
  const std::string v3 = llama(3, 32).build();
  write("gguf", "llama_v3.gguf", v3);
  write("gguf", "llama_v2.gguf", llama(2, 32).build());
  write("gguf", "llama_align1.gguf", llama(3, 1).build());
  write("gguf", "llama_align64.gguf", llama(3, 64).build());
  write("gguf", "truncated.gguf", v3.substr(0, v3.size() / 2));
  GgufWriter counts = llama(3, 32);
  counts.kv_count = ~uint64_t{0};
  counts.tensor_count = uint64_t{1} << 62;
  write("gguf", "huge_counts.gguf", counts.build());
  GgufWriter nested;
  nested.array("n", qkv_test::kArray, 1, le<uint32_t>(qkv_test::kU8) + le<uint64_t>(1) + "x");
  write("gguf", "nested_array.gguf", nested.build());
  GgufWriter overlap;
  overlap.tensor("a", {16}, 0, std::string(64, '\0'))
      .tensor("b", {8}, 0, std::string(32, '\0'), 32);
  write("gguf", "overlapping.gguf", overlap.build());
  GgufWriter huge;
  huge.tensor("t", {uint64_t{1} << 40, uint64_t{1} << 30}, 0, "");
  write("gguf", "huge_dims.gguf", huge.build());
  gguf_block_type_seeds();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s fuzz/corpus\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  const fs::path tmp = fs::temp_directory_path() / "qkv-fuzz-seeds";
  fs::create_directories(tmp);
  safetensors_seeds();
  checkpoint_seeds(tmp);
  decoder_model_seeds(tmp);
  tokenizer_seeds();
  text_seeds();
  char_vocabulary_seeds();
  config_seeds();
  gguf_seeds();
  fs::remove_all(tmp);
  return 0;
}
