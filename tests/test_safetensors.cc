// safetensors: round trips, the exact bytes of the writer, dtype conversions,
// and one hand-made bad file per rule the reader enforces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "qkv/generator.h"
#include "qkv/io/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using qkv::DType;
using qkv::Error;
using qkv::ErrorKind;
using qkv::Shape;
using qkv::Tensor;
using qkv::io::SafetensorsFile;

namespace {

// A file made of a length field (the header's size unless `length` is given),
// the header and the data section.
std::vector<std::byte> make_file(const std::string& header, const std::string& data = "",
                                 std::optional<uint64_t> length = {}) {
  const uint64_t n = length.value_or(header.size());
  std::vector<std::byte> bytes(8);
  std::memcpy(bytes.data(), &n, 8);
  for (char c : header + data) bytes.push_back(static_cast<std::byte>(c));
  return bytes;
}

std::vector<std::byte> to_bytes(const std::string& s) {
  std::vector<std::byte> bytes;
  for (char c : s) bytes.push_back(static_cast<std::byte>(c));
  return bytes;
}

// Asserts that the reader rejects `bytes` with a message naming the file and
// containing `needle`.
void expect_rejected(const std::vector<std::byte>& bytes, const std::string& needle) {
  qkv_test::expect_error([&] { SafetensorsFile::from_bytes(bytes, "bad.safetensors"); },
                         {"'bad.safetensors'", needle}, ErrorKind::kValue);
}

// One well-formed tensor entry of the header.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

class SafetensorsTest : public qkv_test::TempDirTest {};

void expect_same(const Tensor& expected, const Tensor& got) {
  EXPECT_EQ(expected.dtype(), got.dtype());
  EXPECT_EQ(expected.shape(), got.shape());
  // Tensor::is_contiguous() is false for some empty shapes such as [2, 0, 3].
  if (got.numel() > 0) {
    EXPECT_TRUE(got.is_contiguous());
  }
  EXPECT_EQ(expected.to_vector(), got.to_vector());
}

// --- Round trips ---------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndShape) {
  qkv::Generator gen(7);
  const std::map<std::string, Tensor> tensors = {
      {"f32", Tensor::randn({3, 5}, gen)},
      {"f64", Tensor::randn({2, 3, 4}, gen, DType::kFloat64)},
      {"mask", Tensor::from_bools({2, 3}, {true, false, true, false, false, true})},
      {"scalar", Tensor::full({}, 2.5)},
      {"empty", Tensor::zeros({0}, DType::kFloat64)},
      {"empty_3d", Tensor::zeros({2, 0, 3})},
      {"empty_bool", Tensor::zeros({0, 4}, DType::kBool)},
      {"layer.0.weight/with odd chars \xc3\xa9", Tensor::ones({1})},
  };
  const fs::path path = dir_ / "round.safetensors";
  qkv::io::save_safetensors(path, tensors);
  const auto loaded = qkv::io::load_safetensors(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    expect_same(tensor, loaded.at(name));
  }
  // The file is exactly 8 + header + data bytes, the header a multiple of 8.
  const SafetensorsFile file(path);
  EXPECT_EQ(file.names().size(), tensors.size());
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.entry("f64").dtype, "F64");
  EXPECT_EQ(file.entry("f64").nbytes(), 2u * 3 * 4 * 8);
  EXPECT_EQ(file.entry("scalar").shape, Shape{});
}

TEST_F(SafetensorsTest, WritesNonContiguousViewsInRowMajorOrder) {
  qkv::Generator gen(3);
  const Tensor base = Tensor::randn({4, 6}, gen);
  const std::map<std::string, Tensor> tensors = {
      {"transposed", base.transpose(0, 1)},
      {"strided", base.slice(1, 1, 6, 2)},
      {"expanded", Tensor::from_vector(Shape{3}, std::vector<float>{1, 2, 3}).expand({2, 3})},
      {"selected", base.select(1, 4)},
  };
  for (const auto& [name, tensor] : tensors) {
    if (name != "selected") {
      EXPECT_FALSE(tensor.is_contiguous()) << name;
    }
  }
  const auto loaded = SafetensorsFile::from_bytes(qkv::io::serialize_safetensors(tensors));
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    expect_same(tensor.contiguous(), loaded.load(name));
  }
  EXPECT_EQ(loaded.load("expanded").to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST_F(SafetensorsTest, RoundTripsMetadata) {
  const qkv::io::SafetensorsMetadata metadata = {
      {"format", "pt"}, {"quote\"and\\slash", "line\nbreak\ttab\x01"}, {"unicode", "\xe6\xb3\xa8"}};
  const fs::path path = dir_ / "meta.safetensors";
  qkv::io::save_safetensors(path, {{"x", Tensor::ones({2})}}, metadata);
  EXPECT_EQ(SafetensorsFile(path).metadata(), metadata);
  qkv::io::save_safetensors(path, {}, metadata);  // replaces the file; no tensors at all
  const SafetensorsFile file(path);
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(file.metadata(), metadata);
}

// --- The exact bytes of the writer -----------------------------------------------

TEST(SafetensorsBytes, MatchHandComputedFile) {
  // Widest dtype first (F64, F32, BOOL), then by name; header padded to 168.
  const std::string header =
      "{\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
      "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[12,14]}}     ";
  ASSERT_EQ(header.size(), 168u);
  const std::string data(
      "\x00\x00\x00\x00\x00\x00\x00\xc0"  // -2.0 (float64)
      "\x00\x00\x80\x3f"                  // 1.0 (float32)
      "\x01\x00",                         // true, false
      14);
  const std::vector<std::byte> expected =
      to_bytes(std::string("\xa8\0\0\0\0\0\0\0", 8) + header + data);
  const auto bytes = qkv::io::serialize_safetensors({
      {"a", Tensor::full({}, 1.0)},
      {"b", Tensor::from_bools({2}, {true, false})},
      {"c", Tensor::full({1}, -2.0, DType::kFloat64)},
  });
  EXPECT_EQ(bytes, expected);
}

TEST(SafetensorsBytes, MetadataComesFirstWithJsonEscapes) {
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"q\\\"\\n\"},"
      "\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}    ";
  ASSERT_EQ(header.size(), 104u);
  const auto bytes = qkv::io::serialize_safetensors({{"x", Tensor::zeros({0})}},
                                                    {{"note", "q\"\n"}, {"format", "pt"}});
  EXPECT_EQ(bytes, to_bytes(std::string("\x68\0\0\0\0\0\0\0", 8) + header));
}

TEST(SafetensorsBytes, EmptyFileIsEightSpacesOfHeader) {
  EXPECT_EQ(qkv::io::serialize_safetensors({}),
            to_bytes(std::string("\x08\0\0\0\0\0\0\0{}      ", 16)));
}

// --- Reading details -----------------------------------------------------------

TEST(SafetensorsRead, UnalignedDataAndAnyTensorOrder) {
  // An odd-sized header: the data starts at an odd byte, aligned to nothing.
  std::string header =
      "{" + entry("d", "F64", "[2]", 4, 20) + "," + entry("f", "F32", "[1]", 0, 4) + "}";
  if (header.size() % 2 == 0) header += ' ';
  const double d[2] = {0.1, -3e300};
  const float f = 1.5f;
  std::string data(20, '\0');
  std::memcpy(data.data(), &f, 4);
  std::memcpy(data.data() + 4, d, 16);
  const auto file = SafetensorsFile::from_bytes(make_file(header, data));
  EXPECT_EQ(file.names(), (std::vector<std::string>{"d", "f"}));
  EXPECT_EQ(file.load("d").to_vector(), (std::vector<double>{0.1, -3e300}));
  EXPECT_EQ(file.load("f").item(), 1.5);
  EXPECT_EQ(file.raw("f").size(), 4u);
  EXPECT_EQ(file.entry("d").begin, 4u);
}

TEST(SafetensorsRead, HalfPrecisionAndFloat8BecomeFloat32) {
  const std::string header =
      "{" + entry("h", "F16", "[6]", 0, 12) + "," + entry("bf", "BF16", "[2]", 12, 16) + "," +
      entry("e4", "F8_E4M3", "[4]", 16, 20) + "," + entry("e5", "F8_E5M2", "[3]", 20, 23) + "}";
  const std::string data(
      "\x00\x3c"
      "\x00\xc0"
      "\x00\x7c"
      "\x01\x00"
      "\x55\x35"
      "\x00\x80"  // F16
      "\x80\x3f"
      "\x40\xc0"          // BF16
      "\x38\x7e\x01\xff"  // F8_E4M3
      "\x3c\x7c\x01",     // F8_E5M2
      23);
  const auto file = SafetensorsFile::from_bytes(make_file(header, data));
  const Tensor h = file.load("h");
  EXPECT_EQ(h.dtype(), DType::kFloat32);
  const std::vector<double> hv = h.to_vector();
  EXPECT_EQ(hv[0], 1.0);
  EXPECT_EQ(hv[1], -2.0);
  EXPECT_TRUE(std::isinf(hv[2]) && hv[2] > 0);
  EXPECT_EQ(hv[3], std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(hv[4], 0.333251953125);        // 0x3555: nearest half to 1/3
  EXPECT_TRUE(hv[5] == 0.0 && std::signbit(hv[5]));
  EXPECT_EQ(file.load("bf").to_vector(), (std::vector<double>{1.0, -3.0}));
  const std::vector<double> e4 = file.load("e4").to_vector();
  EXPECT_EQ(e4[0], 1.0);
  EXPECT_EQ(e4[1], 448.0);  // the largest e4m3fn value
  EXPECT_EQ(e4[2], std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(e4[3]));
  const std::vector<double> e5 = file.load("e5").to_vector();
  EXPECT_EQ(e5[0], 1.0);
  EXPECT_TRUE(std::isinf(e5[1]));
  EXPECT_EQ(e5[2], std::ldexp(1.0, -16));
}

TEST(SafetensorsRead, IntegersBecomeExactFloat64) {
  const std::string header =
      "{" + entry("i64", "I64", "[3]", 0, 24) + "," + entry("u8", "U8", "[2]", 24, 26) + "," +
      entry("i32", "I32", "[1]", 26, 30) + "," + entry("b", "BOOL", "[3]", 30, 33) + "}";
  std::string data(33, '\0');
  const int64_t ids[3] = {-1, int64_t{1} << 53, int64_t{1} << 62};
  std::memcpy(data.data(), ids, 24);
  data[24] = '\xff';
  data[25] = '\x07';
  const int32_t i32 = -123456;
  std::memcpy(data.data() + 26, &i32, 4);
  data[30] = '\x00', data[31] = '\x02', data[32] = '\x01';  // any non-zero byte is true
  const auto file = SafetensorsFile::from_bytes(make_file(header, data));
  const Tensor t = file.load("i64");
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{-1.0, 0x1p53, 0x1p62}));
  EXPECT_EQ(file.load("u8").to_vector(), (std::vector<double>{255, 7}));
  EXPECT_EQ(file.load("i32").item(), -123456.0);
  EXPECT_EQ(file.load("b").to_vector(), (std::vector<double>{0, 1, 1}));
}

TEST(SafetensorsRead, InexactInt64IsAnError) {
  const int64_t value = (int64_t{1} << 53) + 1;
  std::string data(8, '\0');
  std::memcpy(data.data(), &value, 8);
  const auto file = SafetensorsFile::from_bytes(
      make_file("{" + entry("ids", "I64", "[1]", 0, 8) + "}", data), "ids.safetensors");
  qkv_test::expect_error([&] { file.load("ids"); }, "9007199254740993");
}

TEST(SafetensorsRead, UnloadableDtypeIsATypeErrorButRawWorks) {
  const auto file = SafetensorsFile::from_bytes(
      make_file("{" + entry("s", "F8_E8M0", "[2]", 0, 2) + "," + entry("c", "C64", "[1]", 2, 10) +
                    "," + entry("q", "F4", "[4]", 10, 12) + "}",
                std::string(12, '\x7f')),
      "exotic.safetensors");
  EXPECT_EQ(file.raw("s").size(), 2u);
  EXPECT_EQ(file.raw("q").size(), 2u);  // 4 elements of 4 bits
  for (const char* name : {"s", "c", "q"}) {
    SCOPED_TRACE(name);
    qkv_test::expect_error([&] { file.load(name); }, ErrorKind::kType,
                           "cannot be loaded as a qkv Tensor");
  }
  EXPECT_THROW(file.load_all(), Error);
}

TEST_F(SafetensorsTest, MissingTensorAndMissingFileAreErrors) {
  const auto file =
      SafetensorsFile::from_bytes(qkv::io::serialize_safetensors({{"a", Tensor::ones({1})}}));
  EXPECT_TRUE(file.contains("a"));
  EXPECT_FALSE(file.contains("b"));
  EXPECT_THROW(file.load("b"), Error);
  EXPECT_THROW(file.entry("b"), Error);
  qkv_test::expect_error([&] { SafetensorsFile file2(dir_ / "absent.safetensors"); },
                         ErrorKind::kIO, "absent.safetensors");
}

TEST_F(SafetensorsTest, ErrorsFromDiskNameThePath) {
  const fs::path path = dir_ / "short.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  qkv_test::expect_error([&] { SafetensorsFile file(path); }, path.string());
}

// --- The writer rejects what it cannot write ----------------------------------------

TEST_F(SafetensorsTest, WriterRejectsBadNamesAndLeavesNoFile) {
  const fs::path path = dir_ / "w.safetensors";
  EXPECT_THROW(qkv::io::save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}), Error);
  EXPECT_THROW(qkv::io::save_safetensors(path, {{"a", Tensor()}}), Error);
  EXPECT_THROW(qkv::io::save_safetensors(path, {{"bad\xff", Tensor::ones({1})}}), Error);
  EXPECT_THROW(qkv::io::save_safetensors(path, {}, {{"k", "\xc0\xaf"}}), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
  const Error e = [&] {
    try {
      qkv::io::save_safetensors(dir_ / "missing" / "w.safetensors", {{"a", Tensor::ones({1})}});
    } catch (const Error& e) {
      return e;
    }
    return Error(ErrorKind::kValue, "nothing thrown");
  }();
  EXPECT_EQ(e.kind(), ErrorKind::kIO) << e.what();
}

// --- The reader rejects bad files, one rule at a time ------------------------------

TEST(SafetensorsReject, FileShorterThanTheLengthField) {
  expect_rejected({}, "fewer than the 8");
  expect_rejected(std::vector<std::byte>(7), "fewer than the 8");
}

TEST(SafetensorsReject, HeaderLengthOverLimit) {
  expect_rejected(make_file("{}", "", 100'000'001), "more than the limit");
  expect_rejected(make_file("{}", "", ~uint64_t{0}), "more than the limit");
}

TEST(SafetensorsReject, HeaderLengthPastEndOfFile) {
  expect_rejected(make_file("{}", "", 3), "only 2 bytes follow");
}

TEST(SafetensorsReject, HeaderNotUtf8) {
  const std::string e = entry("a", "F32", "[]", 0, 4);
  expect_rejected(make_file("{\"a\xff\":{}}"), "not valid UTF-8");
  expect_rejected(make_file("{\"\xc0\xaf\":1}"), "not valid UTF-8");      // overlong '/'
  expect_rejected(make_file("{\"\xed\xa0\x80\":1}"), "not valid UTF-8");  // surrogate
  expect_rejected(make_file("{\"\xe6\xb3\":1}"), "not valid UTF-8");      // truncated
  expect_rejected(make_file("{" + e + "}\xf4\x90\x80\x80", std::string(4, '\0')), "UTF-8");
}

TEST(SafetensorsReject, InvalidJson) {
  expect_rejected(make_file("{\"a\":"), "not valid JSON");
  expect_rejected(make_file("{} x"), "not valid JSON");
  expect_rejected(make_file(std::string("{}\0\0", 4)), "NUL byte at byte 2");  // NUL padding
  expect_rejected(make_file(std::string("{}\0 garbage", 10)), "NUL byte");
  expect_rejected(make_file("{/* comment */}"), "not valid JSON");
  expect_rejected(make_file("[]"), "does not start with '{'");
  expect_rejected(make_file(" {}"), "does not start with '{'");
  expect_rejected(make_file(""), "does not start with '{'");
}

TEST(SafetensorsReject, DeepNesting) {
  const int depth = 100000;
  expect_rejected(make_file("{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}"),
                  "more than 64 levels deep");
  // Long values are cut short in messages.
  std::string zeros = "[0";
  for (int i = 0; i < 1000; ++i) zeros += ",0";
  zeros += "]";
  try {
    SafetensorsFile::from_bytes(make_file("{\"a\":" + zeros + "}"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("must be an object, got [0,0,"), std::string::npos) << message;
    EXPECT_LT(message.size(), 300u) << message;
  }
}

TEST(SafetensorsReject, DuplicateKeys) {
  const std::string a = entry("a", "F32", "[1]", 0, 4);
  expect_rejected(make_file("{" + a + "," + a + "}", std::string(4, '\0')),
                  "repeats tensor name \"a\"");
  expect_rejected(
      make_file("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}",
                std::string(4, '\0')),
      "repeats key \"dtype\" inside \"a\"");
  expect_rejected(make_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
                  "repeats key \"k\" inside \"__metadata__\"");
}

TEST(SafetensorsReject, EntryNotAnObject) {
  expect_rejected(make_file("{\"a\":3}"), "tensor \"a\" must be an object");
  expect_rejected(make_file("{\"a\":[\"F32\",[],[0,0]]}"), "must be an object");
}

TEST(SafetensorsReject, MissingOrUnknownFields) {
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[0]}}"),
                  "tensor \"a\" has no field \"data_offsets\"");
  expect_rejected(make_file("{\"a\":{\"shape\":[0],\"data_offsets\":[0,0]}}"),
                  "has no field \"dtype\"");
  expect_rejected(
      make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],\"extra\":1}}"),
      "unknown field \"extra\"");
}

TEST(SafetensorsReject, UnknownDtype) {
  expect_rejected(make_file("{" + entry("a", "F128", "[0]", 0, 0) + "}"), "unknown dtype \"F128\"");
  expect_rejected(make_file("{" + entry("a", "f32", "[0]", 0, 0) + "}"), "unknown dtype \"f32\"");
  expect_rejected(make_file("{\"a\":{\"dtype\":4,\"shape\":[0],\"data_offsets\":[0,0]}}"),
                  "\"dtype\" must be a string");
}

TEST(SafetensorsReject, ShapeEntriesMustBeNonNegativeIntegers) {
  expect_rejected(make_file("{" + entry("a", "F32", "[-1]", 0, 0) + "}"), "has -1 at dimension 0");
  expect_rejected(make_file("{" + entry("a", "F32", "[2,1.5]", 0, 12) + "}", std::string(12, '\0')),
                  "has 1.5 at dimension 1");
  expect_rejected(make_file("{" + entry("a", "F32", "[\"2\"]", 0, 8) + "}", std::string(8, '\0')),
                  "non-negative integer");
  expect_rejected(make_file("{" + entry("a", "F32", "[1e2]", 0, 400) + "}", std::string(400, '\0')),
                  "non-negative integer");
  expect_rejected(make_file("{" + entry("a", "F32", "[9223372036854775808]", 0, 0) + "}"),
                  "non-negative integer");
  expect_rejected(make_file("{" + entry("a", "F32", "4", 0, 16) + "}", std::string(16, '\0')),
                  "\"shape\" must be an array");
}

TEST(SafetensorsReject, SizeOverflow) {
  expect_rejected(make_file("{" + entry("a", "F32", "[4294967296,4294967296]", 0, 0) + "}"),
                  "overflows");
  expect_rejected(make_file("{" + entry("a", "F64", "[2305843009213693952]", 0, 0) + "}"),
                  "overflows");
}

TEST(SafetensorsReject, OffsetsDisagreeWithShapeAndDtype) {
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", 0, 4) + "}", std::string(4, '\0')),
                  "span 4 bytes but shape [2] of F32 needs 8");
  expect_rejected(make_file("{" + entry("a", "F4", "[3]", 0, 2) + "}", std::string(2, '\0')),
                  "not a whole number of bytes");
}

TEST(SafetensorsReject, MalformedOffsets) {
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}"),
                  "[begin, end]");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,-1]}}"),
                  "[begin, end]");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}"),
                  "end before they begin");
}

TEST(SafetensorsReject, OffsetsPastEndOfData) {
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", 4, 12) + "}", std::string(8, '\0')),
                  "past the end of the data section (8 bytes)");
}

TEST(SafetensorsReject, TensorsMustTileTheDataExactly) {
  const std::string data(12, '\0');
  expect_rejected(
      make_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
                data),
      "bytes [4, 8) of the data section belong to no tensor");
  expect_rejected(
      make_file("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}",
                data),
      "tensor \"b\" at bytes [4, 12) overlaps tensor \"a\"");
  expect_rejected(
      make_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 0, 4) + "}",
                std::string(4, '\0')),
      "overlaps");
  // An empty tensor inside another one is an overlap too (as in the reference).
  expect_rejected(
      make_file("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("z", "F32", "[0]", 4, 4) + "}",
                std::string(8, '\0')),
      "overlaps");
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", 0, 8) + "}", data),
                  "cover only 8 (4 trailing bytes)");
  expect_rejected(make_file("{}", "x"), "cover only 0 (1 trailing bytes)");
  // Empty tensors at the boundaries are fine.
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(
      make_file("{" + entry("z0", "F32", "[0]", 0, 0) + "," + entry("a", "F32", "[2]", 0, 8) + "," +
                    entry("z1", "F32", "[3,0]", 8, 8) + "}",
                std::string(8, '\0'))));
}

TEST(SafetensorsReject, MetadataMustMapStringsToStrings) {
  expect_rejected(make_file("{\"__metadata__\":[\"a\"]}"), "\"__metadata__\" must be an object");
  expect_rejected(make_file("{\"__metadata__\":null}"), "\"__metadata__\" must be an object");
  expect_rejected(make_file("{\"__metadata__\":{\"epoch\":3}}"),
                  "must map strings to strings, but \"epoch\" maps to 3");
  expect_rejected(make_file("{\"__metadata__\":{\"nested\":{\"a\":\"b\"}}}"),
                  "\"nested\" maps to {\"a\":\"b\"}");
}

// --- No input crashes the reader ------------------------------------------------

TEST(SafetensorsFuzz, MutatedAndTruncatedFilesOnlyThrowQkvErrors) {
  qkv::Generator gen(11);
  const std::vector<std::byte> good =
      qkv::io::serialize_safetensors({{"w", Tensor::randn({3, 4}, gen)},
                                      {"d", Tensor::randn({2}, gen, DType::kFloat64)},
                                      {"m", Tensor::from_bools({3}, {true, false, true})}},
                                     {{"format", "pt"}});
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bytes = good;
    if (trial % 10 == 0) {
      bytes.resize(gen.next_u64() % bytes.size());
    } else {
      for (int flips = 1 + trial % 3; flips > 0; --flips) {
        // Mostly the length field and the header, where the parsing happens.
        const size_t at = gen.next_u64() % (trial % 2 ? 8 + 120 : bytes.size());
        bytes[at] = static_cast<std::byte>(gen.next_u64());
      }
    }
    try {
      const auto file = SafetensorsFile::from_bytes(bytes);
      for (const std::string& name : file.names()) file.load(name);
      ++accepted;
    } catch (const Error&) {
      // Expected for most mutations.
    } catch (const std::exception& e) {
      ADD_FAILURE() << "trial " << trial << ": not a qkv::Error: " << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // mutations of tensor data stay valid files
}

}  // namespace
