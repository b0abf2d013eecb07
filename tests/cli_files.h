// Files the tests/test_cli*.cc tests give to the `qkv` binary or read back
// from it: a small fortune file to train on, the bytes of a file, the rows of
// the .npy that `qkv embed` writes.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace qkv_test {

// A small fortune file: 30 entries of four texts, separated by "%" lines.
inline void write_fortunes(const std::filesystem::path& path) {
  std::ofstream out(path);
  const char* entries[] = {
      "The early bird gets the worm, but the second mouse gets the cheese.\n",
      "A clean desk is a sign of a cluttered desk drawer.\n",
      "Never put off until tomorrow what you can do the day after tomorrow.\n\t\t-- Mark Twain\n",
      "Time flies like an arrow; fruit flies like a banana.\n",
  };
  for (int i = 0; i < 30; ++i) out << entries[i % 4] << "%\n";
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The float32 rows of a .npy file written by `qkv embed` ([N, D], '<f4').
inline std::vector<std::vector<float>> npy_rows(const std::string& bytes, size_t d) {
  std::vector<std::vector<float>> rows;
  const size_t header =
      10 + static_cast<unsigned char>(bytes[8]) + 256 * static_cast<unsigned char>(bytes[9]);
  for (size_t at = header; at + 4 * d <= bytes.size(); at += 4 * d) {
    std::vector<float> row(d);
    std::memcpy(row.data(), bytes.data() + at, 4 * d);  // the bytes may be unaligned
    rows.push_back(row);
  }
  return rows;
}

}  // namespace qkv_test
