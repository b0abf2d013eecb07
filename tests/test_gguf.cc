// GGUF reader: files written by the tiny writer of gguf_writer.h read back (v2 and v3, every
// value type, alignments), one hand-made bad file per rule the reader enforces, and the real
// SmolLM2 file when scripts/fetch_model.sh has put it in models/.
#include <gtest/gtest.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gguf_writer.h"
#include "qkv/io/gguf.h"
#include "test_util.h"

namespace fs = std::filesystem;
using qkv::DType;
using qkv::ErrorKind;
using qkv::Shape;
using qkv::Tensor;
using qkv::io::GgmlType;
using qkv::io::GgufFile;
using qkv::io::GgufValueType;
using qkv_test::GgufWriter;
using qkv_test::le;

namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_1 = 3, kQ8_0 = 8, kI8 = 24, kI32 = 26, kI64 = 27,
                   kF64 = 28, kBF16 = 30;

GgufFile read(const GgufWriter& w) { return GgufFile::from_bytes(w.bytes(), "t.gguf"); }

// Asserts that the reader rejects `w`'s file with a kValue error naming the file and holding
// every one of `parts`.
void expect_rejected(const GgufWriter& w, std::vector<std::string> parts,
                     qkv_test::CallSite where = {}) {
  parts.insert(parts.begin(), "invalid GGUF file 't.gguf'");
  qkv_test::expect_error([&] { read(w); }, parts, ErrorKind::kValue, where);
}

std::string floats(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s += le(v);
  return s;
}

// A small valid file: one entry of each scalar type, arrays, and a few tensors.
GgufWriter sample(uint32_t version = 3) {
  GgufWriter w;
  w.version = version;
  w.str("general.architecture", "llama")
      .kv("u8", qkv_test::kU8, le<uint8_t>(200))
      .kv("i8", qkv_test::kI8, le<int8_t>(-100))
      .kv("u16", qkv_test::kU16, le<uint16_t>(60000))
      .kv("i16", qkv_test::kI16, le<int16_t>(-30000))
      .u32("llama.block_count", 30)
      .i32("i32", -5)
      .f32("llama.rope.freq_base", 10000.5f)
      .boolean("flag", true)
      .u64("u64", 18446744073709551615ull)
      .i64("i64", -9000000000ll)
      .f64("f64", 0.1)
      .strings("tokenizer.ggml.tokens", {"a",
                                         "\xc4\xa0"
                                         "b",
                                         ""})
      .numbers<float>("tokenizer.ggml.scores", qkv_test::kF32, {0.5f, -1.0f, 2.0f})
      .numbers<int32_t>("tokenizer.ggml.token_type", qkv_test::kI32, {1, 2, 3})
      .numbers<uint64_t>("big", qkv_test::kU64, {1, 18446744073709551615ull})
      .array("bools", qkv_test::kBool, 3, std::string("\x01\x00\x01", 3));
  w.tensor("w", {2, 3}, kF32, floats({1, 2, 3, 4, 5, 6}));
  w.tensor("h", {3}, kF16, le<uint16_t>(0x3c00) + le<uint16_t>(0xc000) + le<uint16_t>(0x0001));
  w.tensor("b", {2}, kBF16, le<uint16_t>(0x3f80) + le<uint16_t>(0xc0a0));
  return w;
}

void expect_sample(const GgufFile& f, uint32_t version) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.keys().size(), 17u);
  EXPECT_EQ(f.keys()[0], "general.architecture");  // file order
  EXPECT_EQ(f.keys()[16], "bools");
  EXPECT_EQ(f.string("general.architecture"), "llama");
  EXPECT_EQ(f.uint("u8"), 200u);
  EXPECT_EQ(f.integer("i8"), -100);
  EXPECT_EQ(f.integer("u16"), 60000);
  EXPECT_EQ(f.integer("i16"), -30000);
  EXPECT_EQ(f.uint("llama.block_count"), 30u);
  EXPECT_EQ(f.integer("llama.block_count"), 30);
  EXPECT_EQ(f.integer("i32"), -5);
  EXPECT_EQ(f.number("llama.rope.freq_base"), 10000.5);
  EXPECT_TRUE(f.boolean("flag"));
  EXPECT_EQ(f.uint("u64"), 18446744073709551615ull);
  EXPECT_EQ(f.integer("i64"), -9000000000ll);
  EXPECT_EQ(f.number("f64"), 0.1);
  EXPECT_EQ(f.strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a",
                                                                          "\xc4\xa0"
                                                                          "b",
                                                                          ""}));
  EXPECT_EQ(f.numbers("tokenizer.ggml.scores"), (std::vector<double>{0.5, -1.0, 2.0}));
  EXPECT_EQ(f.integers("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(std::get<std::vector<bool>>(std::get<qkv::io::GgufArray>(f.value("bools"))),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.type("u16"), GgufValueType::kUint16);
  EXPECT_EQ(f.type("bools"), GgufValueType::kArray);

  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "w");
  EXPECT_EQ(f.tensor("w").shape(), (Shape{3, 2}));  // torch order: dims reversed
  EXPECT_EQ(f.tensor("w").bytes, 24u);
  EXPECT_EQ(f.tensor("h").offset, 32u);  // after w's 24 bytes, padded to 32
  EXPECT_EQ(f.tensor("b").offset, 64u);
  const Tensor w = f.load("w");
  EXPECT_EQ(w.dtype(), DType::kFloat32);
  EXPECT_EQ(w.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], i + 1.0f);
  const Tensor h = f.load("h");
  EXPECT_EQ(h.data<float>()[0], 1.0f);
  EXPECT_EQ(h.data<float>()[1], -2.0f);
  EXPECT_EQ(h.data<float>()[2], 0x1p-24f);  // the smallest subnormal half
  const Tensor b = f.load("b");
  EXPECT_EQ(b.data<float>()[0], 1.0f);
  EXPECT_EQ(b.data<float>()[1], -5.0f);
}

TEST(Gguf, ReadsVersion3) { expect_sample(read(sample(3)), 3); }

TEST(Gguf, ReadsVersion2) { expect_sample(read(sample(2)), 2); }

using GgufMapped = qkv_test::TempDirTest;

TEST_F(GgufMapped, ReadsFromAMappedFile) {
  const fs::path path = write("sample.gguf", sample().build());
  std::shared_ptr<const void> storage;
  std::span<const std::byte> data;
  {
    const GgufFile f(path);
    expect_sample(f, 3);
    EXPECT_EQ(f.source(), path.string());
    storage = f.storage();
    data = f.tensor("w").data;
  }
  fs::remove(path);  // the mapping outlives the name and the GgufFile
  float first;
  std::memcpy(&first, data.data(), 4);
  EXPECT_EQ(first, 1.0f);
  storage.reset();
}

TEST(Gguf, FileErrorsAreIOErrors) {
  const std::string missing = "/nonexistent/dir/x.gguf";
  qkv_test::expect_error([&] { GgufFile f(missing); }, ErrorKind::kIO,
                         {"cannot read GGUF file", missing});
  try {
    GgufFile f(missing);
  } catch (const qkv::Error& e) {
    EXPECT_EQ(e.os_error(), ENOENT);
  }
  qkv_test::expect_error([&] { GgufFile f("/"); }, ErrorKind::kIO, "not a regular file");
}

TEST(Gguf, RejectsEveryTruncation) {
  const std::vector<std::byte> whole = sample().bytes();
  for (size_t n = 0; n < whole.size(); ++n) {
    std::vector<std::byte> prefix(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n));
    const std::string message = qkv_test::expect_error(
        [&] { GgufFile::from_bytes(prefix, "cut.gguf"); }, "invalid GGUF file 'cut.gguf'");
    if (message.empty()) {
      ADD_FAILURE() << "a prefix of " << n << " bytes was accepted";
      break;
    }
  }
}

TEST(Gguf, RejectsBadMagicAndVersions) {
  std::vector<std::byte> bytes = sample().bytes();
  bytes[0] = std::byte{'g'};
  qkv_test::expect_error([&] { GgufFile::from_bytes(bytes, "t.gguf"); },
                         {"'t.gguf'", "starts with \"gGUF\"", "magic \"GGUF\""});
  GgufWriter w = sample();
  w.version = 1;
  expect_rejected(w, {"version 1 is not supported", "versions 2 and 3"});
  w.version = 4;
  expect_rejected(w, {"version 4 is not supported"});
  w.version = 0;
  expect_rejected(w, {"version 0 is not supported"});
  w.version = 0x03000000;
  expect_rejected(w, {"big-endian"});
}

TEST(Gguf, RejectsCountsThatCannotFit) {
  GgufWriter w = sample();
  w.kv_count = uint64_t{1} << 60;
  expect_rejected(w, {"1152921504606846976 metadata entries", "only"});
  w = sample();
  w.tensor_count = std::numeric_limits<uint64_t>::max();
  expect_rejected(w, {"18446744073709551615 tensor infos", "only"});
  w = sample();
  w.kv_count = 18;  // one more than there are: the tensor infos are read as an entry
  expect_rejected(w, {});
}

TEST(Gguf, RejectsLengthsThatCannotFit) {
  GgufWriter w;
  w.kv(std::string(3, 'k'), qkv_test::kU8, "x");
  std::string file = w.build();
  file.replace(24, 8, le<uint64_t>(uint64_t{1} << 62));  // the key's length
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(file.data()),
                               reinterpret_cast<const std::byte*>(file.data()) + file.size());
  qkv_test::expect_error([&] { GgufFile::from_bytes(bytes, "t.gguf"); },
                         {"metadata entry 0", "the key is 4611686018427387904 bytes long"});
  GgufWriter s;
  s.kv("s", qkv_test::kString, le<uint64_t>(1000) + "abc");
  expect_rejected(s, {"key \"s\"", "the string value is 1000 bytes long but only 3"});
  GgufWriter a;
  a.array("a", qkv_test::kU32, uint64_t{1} << 61, "abcd");
  expect_rejected(a, {"key \"a\"", "an array of 2305843009213693952 u32", "4 bytes per element"});
  GgufWriter t;
  t.array("tokens", qkv_test::kString, 2, qkv_test::gguf_str("ok") + le<uint64_t>(99) + "x");
  expect_rejected(t, {"key \"tokens\"", "element 1 of the array is a string of 99 bytes"});
}

TEST(Gguf, RejectsBadValueTypes) {
  GgufWriter w;
  w.kv("k", 13, le<uint32_t>(0));
  expect_rejected(w, {"key \"k\"", "value type is 13"});
  GgufWriter nested;
  nested.array("n", qkv_test::kArray, 1, le<uint32_t>(qkv_test::kU8) + le<uint64_t>(0));
  expect_rejected(nested, {"key \"n\"", "array of arrays"});
  GgufWriter element;
  element.array("e", 77, 0, "");
  expect_rejected(element, {"key \"e\"", "element type is 77"});
  GgufWriter b;
  b.kv("b", qkv_test::kBool, le<uint8_t>(2));
  expect_rejected(b, {"key \"b\"", "bool holding 2", "0 or 1"});
  GgufWriter bools;
  bools.array("bs", qkv_test::kBool, 2, std::string("\x01\x05", 2));
  expect_rejected(bools, {"key \"bs\"", "element 1 of the array is a bool holding 5"});
}

TEST(Gguf, RejectsBadKeysAndNames) {
  auto key = [](const std::string& k) {
    GgufWriter w;
    w.u32(k, 1);
    return w;
  };
  expect_rejected(key(""), {"metadata entry 0", "key is empty"});
  expect_rejected(key("a\xff"), {"metadata entry 0", "\"a\\xff\"", "not valid UTF-8 (byte 1)"});
  expect_rejected(key("\xed\xa0\x80"), {"not valid UTF-8 (byte 0)"});  // a surrogate
  expect_rejected(key("\xc0\xaf"), {"not valid UTF-8 (byte 0)"});      // overlong '/'
  expect_rejected(key(std::string("a\0b", 3)), {"\"a\\x00b\"", "NUL byte"});
  GgufWriter twice = key("k");
  twice.u32("k", 2);
  expect_rejected(twice, {"metadata entry 1 (key \"k\")", "repeated"});

  GgufWriter names;
  names.tensor("t\x80", {1}, kF32, floats({1}));
  expect_rejected(names, {"tensor info 0", "\"t\\x80\"", "not valid UTF-8"});
  GgufWriter empty;
  empty.tensor("", {1}, kF32, floats({1}));
  expect_rejected(empty, {"tensor info 0", "tensor name is empty"});
  GgufWriter same;
  same.tensor("t", {1}, kF32, floats({1})).tensor("t", {1}, kF32, floats({2}));
  expect_rejected(same, {"tensor \"t\" (tensor info 1)", "name is repeated"});
}

TEST(Gguf, Alignment) {
  for (uint32_t alignment : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    w.alignment = alignment;
    w.u32("general.alignment", alignment);
    w.tensor("a", {3}, kF32, floats({1, 2, 3})).tensor("b", {1}, kF32, floats({4}));
    const GgufFile f = read(w);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    EXPECT_EQ(f.tensor("b").offset, (12 + alignment - 1) / alignment * alignment);
    EXPECT_EQ(f.load("b").data<float>()[0], 4.0f);
    EXPECT_EQ(f.load("a").data<float>()[2], 3.0f);
  }
  GgufWriter misaligned;
  misaligned.alignment = 64;
  misaligned.u32("general.alignment", 64);
  misaligned.tensor("a", {1}, kF32, floats({1})).tensor("b", {1}, kF32, floats({2}), 32);
  expect_rejected(misaligned, {"tensor \"b\"", "data offset 32", "multiple of the alignment 64"});
  GgufWriter default_alignment;
  default_alignment.tensor("a", {1}, kF32, floats({1}), 4);
  expect_rejected(default_alignment, {"tensor \"a\"", "offset 4", "alignment 32"});

  GgufWriter odd;
  odd.u32("general.alignment", 48);
  expect_rejected(odd, {"\"general.alignment\" is 48", "power of two"});
  GgufWriter zero;
  zero.u32("general.alignment", 0);
  expect_rejected(zero, {"\"general.alignment\" is 0", "power of two"});
  GgufWriter wide;
  wide.u64("general.alignment", 32);
  expect_rejected(wide, {"\"general.alignment\" is u64", "expected u32"});
}

TEST(Gguf, RejectsBadTensorInfos) {
  GgufWriter dims5;
  dims5.tensor("t", {1, 1, 1, 1, 1}, kF32, floats({1}));
  expect_rejected(dims5, {"tensor \"t\"", "n_dims is 5", "at most 4"});
  GgufWriter huge;
  huge.tensor("t", {uint64_t{1} << 63}, kI8, "");
  expect_rejected(huge, {"tensor \"t\"", "dimension 0 is 9223372036854775808"});
  GgufWriter product;
  product.tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, kI8, "");
  expect_rejected(product, {"tensor \"t\"", "dims [4294967296, 4294967296]", "2^63 - 1 elements"});
  GgufWriter bytes;
  bytes.tensor("t", {uint64_t{1} << 61, 2}, kF64, "");
  expect_rejected(bytes, {"tensor \"t\"", "of F64 take more than 2^64 - 1 bytes"});
  GgufWriter removed;
  removed.tensor("q", {32}, 4, "");  // Q4_2, removed from ggml
  expect_rejected(removed, {"tensor \"q\"", "unknown ggml type 4"});
  GgufWriter unknown;
  unknown.tensor("q", {32}, 1000, "");
  expect_rejected(unknown, {"tensor \"q\"", "unknown ggml type 1000"});
  GgufWriter block;
  block.tensor("q", {16, 2}, kQ4_1, std::string(40, '\0'));
  expect_rejected(block, {"tensor \"q\"", "dims[0] = 16", "multiple of the block size 32"});
}

TEST(Gguf, RejectsTensorsOutsideTheDataOrOverlapping) {
  GgufWriter past;
  past.tensor("a", {1}, kF32, floats({1})).tensor("b", {4}, kF32, "", 1 << 20);
  expect_rejected(past, {"tensor \"b\"", "at data offset 1048576", "past the end"});
  GgufWriter far;
  far.tensor("a", {1}, kF32, floats({1}), uint64_t{1} << 63);
  expect_rejected(far, {"tensor \"a\"", "past the end"});
  GgufWriter cut;
  cut.tensor("a", {8}, kF32, floats({1, 2}));  // 8 bytes of 32
  expect_rejected(cut, {"tensor \"a\" (F32 [8], 32 bytes at data offset 0)", "past the end"});
  GgufWriter overlap;
  overlap.tensor("a", {16}, kF32, std::string(64, '\0')).tensor("b", {1}, kF32, floats({1}), 32);
  expect_rejected(overlap,
                  {"tensor \"b\" at data bytes [32, 36) overlaps tensor \"a\" at [0, 64)"});
  GgufWriter zero;  // a dimension of 0 makes the tensor empty, however large the others
  zero.tensor("z", {uint64_t{1} << 62, 4, 0}, kF32, "")
      .tensor("y", {129, uint64_t{1} << 56, 0}, kF32, "");
  EXPECT_EQ(read(zero).tensor("z").numel(), 0);
  qkv_test::expect_error(
      [&] { read(zero).load("z"); },
      {"'t.gguf'", "tensor \"z\" cannot be loaded", "[0, 4, 4611686018427387904]"});
  EXPECT_EQ(read(zero).tensor("y").numel(), 0);
  GgufWriter empty;  // tensors of 0 bytes overlap nothing
  empty.tensor("a", {0, 3}, kF32, "", 0).tensor("b", {1}, kF32, floats({7}), 0);
  const GgufFile f = read(empty);
  EXPECT_EQ(f.load("a").shape(), (Shape{3, 0}));
  EXPECT_EQ(f.load("b").data<float>()[0], 7.0f);

  // The tensor infos end where the file ends: no room for the padding.
  GgufWriter unpadded;
  unpadded.tensor("abc", {0}, kF32, "");
  std::string u = unpadded.build();
  const size_t infos_end = 24 + (8 + 3) + 4 + 8 + 4 + 8;
  u.resize(infos_end);
  std::vector<std::byte> ub(reinterpret_cast<const std::byte*>(u.data()),
                            reinterpret_cast<const std::byte*>(u.data()) + u.size());
  qkv_test::expect_error([&] { GgufFile::from_bytes(ub, "t.gguf"); },
                         {"the data section should start at byte 64", "only 59 bytes"});
}

TEST(Gguf, LoadsQuantizedTypesDequantized) {
  // Two rows of one Q4_1 block each: d = 1 (fp16 0x3c00), m = -0.5 (0xb800); byte i holds
  // weight i (low nibble) and weight i + 16 (high nibble).
  std::string block = le<uint16_t>(0x3c00) + le<uint16_t>(0xb800);
  for (int i = 0; i < 16; ++i) block += static_cast<char>(i | (15 - i) << 4);
  GgufWriter w;
  w.tensor("q", {32, 2}, kQ4_1, block + block);
  const GgufFile f = read(w);
  const Tensor q = f.load("q");
  ASSERT_EQ(q.shape(), (Shape{2, 32}));
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(q.data<float>()[r * 32 + i], static_cast<float>(i) - 0.5f);
      EXPECT_EQ(q.data<float>()[r * 32 + 16 + i], static_cast<float>(15 - i) - 0.5f);
    }
}

TEST(Gguf, LoadsPlainTypesExactly) {
  GgufWriter w;
  w.tensor("f64", {2}, kF64, le(0.1) + le(-2.5))
      .tensor("i8", {3}, kI8, std::string("\x80\x7f\x00", 3))
      .tensor("i32", {1, 2}, kI32, le<int32_t>(-2147483647 - 1) + le<int32_t>(7))
      .tensor("i64", {1}, kI64, le<int64_t>(-(int64_t{1} << 53)))
      .tensor("i64big", {1}, kI64, le<int64_t>((int64_t{1} << 53) + 1))
      .tensor(
          "h", {4}, kF16,
          le<uint16_t>(0x7c00) + le<uint16_t>(0xfc00) + le<uint16_t>(0x7e00) + le<uint16_t>(0x03ff))
      .tensor("q", {32}, kQ4_1, std::string(20, '\0'))
      .tensor("q2", {256}, 10, std::string(84, '\0'))  // Q2_K: no dequantizer
      .tensor("s", {}, kF32, floats({3.5f}));
  const GgufFile f = read(w);
  const Tensor f64 = f.load("f64");
  EXPECT_EQ(f64.dtype(), DType::kFloat64);
  EXPECT_EQ(f64.data<double>()[0], 0.1);
  const Tensor i8 = f.load("i8");
  EXPECT_EQ(i8.data<double>()[0], -128.0);
  EXPECT_EQ(i8.data<double>()[1], 127.0);
  const Tensor i32 = f.load("i32");
  EXPECT_EQ(i32.shape(), (Shape{2, 1}));
  EXPECT_EQ(i32.data<double>()[0], -2147483648.0);
  EXPECT_EQ(f.load("i64").data<double>()[0], -0x1p53);
  qkv_test::expect_error([&] { f.load("i64big"); },
                         {"'t.gguf'", "\"i64big\"", "9007199254740993", "cannot represent"});
  const Tensor h = f.load("h");
  EXPECT_EQ(h.data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h.data<float>()[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h.data<float>()[2]));
  EXPECT_EQ(h.data<float>()[3], 1023 * 0x1p-24f);  // the largest subnormal
  EXPECT_EQ(f.load("s").shape(), Shape{});
  EXPECT_EQ(f.load("s").data<float>()[0], 3.5f);
  EXPECT_EQ(f.tensor("q").data.size(), 20u);
  qkv_test::expect_error([&] { f.load("q2"); }, ErrorKind::kType,
                         {"'t.gguf'", "tensor \"q2\" is Q2_K",
                          "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and IQ4_NL only"});
  qkv_test::expect_error([&] { f.tensor("nope"); }, {"'t.gguf' has no tensor \"nope\""});
  EXPECT_FALSE(f.has_tensor("nope"));
  EXPECT_TRUE(f.has_tensor("q"));
}

TEST(Gguf, TypedGettersNameKeyAndTypes) {
  const GgufFile f = read(sample());
  qkv_test::expect_error([&] { f.string("missing"); },
                         {"'t.gguf' has no metadata key \"missing\""});
  qkv_test::expect_error([&] { f.uint("general.architecture"); }, ErrorKind::kType,
                         {"'t.gguf'", "\"general.architecture\" is string", "expected an integer"});
  qkv_test::expect_error([&] { f.string("llama.block_count"); }, ErrorKind::kType,
                         {"\"llama.block_count\" is u32", "expected a string"});
  qkv_test::expect_error([&] { f.number("llama.block_count"); }, ErrorKind::kType,
                         {"is u32", "expected a number (f32 or f64)"});
  qkv_test::expect_error([&] { f.boolean("f64"); }, ErrorKind::kType, {"is f64", "a bool"});
  qkv_test::expect_error([&] { f.strings("tokenizer.ggml.scores"); }, ErrorKind::kType,
                         {"is array of f32 (3 elements)", "expected an array of strings"});
  qkv_test::expect_error([&] { f.integers("tokenizer.ggml.tokens"); }, ErrorKind::kType,
                         {"is array of string (3 elements)", "an array of integers"});
  qkv_test::expect_error([&] { f.numbers("u8"); }, ErrorKind::kType, {"is u8", "numbers"});
  qkv_test::expect_error([&] { f.uint("i8"); }, {"\"i8\" is -100", "non-negative"});
  qkv_test::expect_error([&] { f.integer("u64"); },
                         {"\"u64\" is 18446744073709551615", "more than an int64"});
  qkv_test::expect_error([&] { f.integers("big"); },
                         {"\"big\" holds 18446744073709551615 at element 1"});

  EXPECT_EQ(f.find_integer("absent"), std::nullopt);
  EXPECT_EQ(f.find_string("absent"), std::nullopt);
  EXPECT_EQ(f.find_uint("llama.block_count"), 30u);
  EXPECT_EQ(f.find_number("llama.rope.freq_base"), 10000.5);
  EXPECT_EQ(f.find_boolean("flag"), true);
  EXPECT_EQ(f.find_string("general.architecture"), "llama");
  // Present with another type: an error, not "absent".
  qkv_test::expect_error([&] { f.find_integer("general.architecture"); }, ErrorKind::kType,
                         "is string");
}

TEST(Gguf, TypeTable) {
  // The sizes the brief names, as in llama.cpp's ggml-common.h block structs.
  const std::map<uint32_t, std::tuple<std::string, uint32_t, uint32_t>> expected = {
      {0, {"F32", 1, 4}},       {1, {"F16", 1, 2}},       {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},    {6, {"Q5_0", 32, 22}},    {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},    {9, {"Q8_1", 32, 36}},    {10, {"Q2_K", 256, 84}},
      {11, {"Q3_K", 256, 110}}, {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}}, {15, {"Q8_K", 256, 292}}, {24, {"I8", 1, 1}},
      {25, {"I16", 1, 2}},      {26, {"I32", 1, 4}},      {27, {"I64", 1, 8}},
      {28, {"F64", 1, 8}},      {30, {"BF16", 1, 2}}};
  for (const auto& [id, want] : expected) {
    const auto* traits = qkv::io::ggml_type_traits(id);
    ASSERT_NE(traits, nullptr) << id;
    EXPECT_EQ(traits->name, std::get<0>(want));
    EXPECT_EQ(traits->block_elements, std::get<1>(want));
    EXPECT_EQ(traits->block_bytes, std::get<2>(want));
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 1000u})
    EXPECT_EQ(qkv::io::ggml_type_traits(removed), nullptr) << removed;
  EXPECT_EQ(qkv::io::ggml_type_name(GgmlType::kQ4_1), "Q4_1");
  EXPECT_TRUE(qkv::io::ggml_type_is_quantized(GgmlType::kQ8_0));
  EXPECT_FALSE(qkv::io::ggml_type_is_quantized(GgmlType::kBF16));
}

// --- The real model ------------------------------------------------------------------------

using qkv_test::smollm2_path;

TEST(GgufSmolLM2, ReadsTheWholeFile) {
  if (!fs::exists(smollm2_path()))
    GTEST_SKIP() << smollm2_path() << " is missing: run scripts/fetch_model.sh";
  const GgufFile f(smollm2_path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.string("general.architecture"), "llama");
  EXPECT_EQ(f.uint("llama.block_count"), 30u);
  EXPECT_EQ(f.uint("llama.embedding_length"), 576u);
  EXPECT_EQ(f.uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.strings("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.strings("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.integers("tokenizer.ggml.token_type").size(), 49152u);

  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) ++by_type[std::string(qkv::io::ggml_type_name(t.type))];
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(by_type["Q4_1"], 210);
  EXPECT_EQ(by_type["Q8_0"], 1);
  EXPECT_EQ(by_type["F32"], 61);
  EXPECT_EQ(f.tensor("token_embd.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(f.tensor("token_embd.weight").shape(), (Shape{49152, 576}));
  EXPECT_EQ(f.tensor("blk.0.attn_k.weight").shape(), (Shape{192, 576}));  // 3 KV heads x 64

  const Tensor norm = f.load("output_norm.weight");
  EXPECT_EQ(norm.shape(), (Shape{576}));
  for (int64_t i = 0; i < norm.numel(); ++i) ASSERT_TRUE(std::isfinite(norm.data<float>()[i]));
  // Quantized tensors load dequantized: Q4_1 rows of blocks w = d·q + m.
  const Tensor q = f.load("blk.0.attn_q.weight");
  EXPECT_EQ(q.shape(), (Shape{576, 576}));
  for (int64_t i = 0; i < q.numel(); ++i) ASSERT_TRUE(std::isfinite(q.data<float>()[i]));
}

}  // namespace
