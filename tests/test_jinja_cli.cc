// `qkv chat --chat-template NAME`, run as a user would on a tiny llama GGUF
// file: a built-in template instead of the file's, and the messages when the
// file has none or the name is unknown.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_runner.h"
#include "tiny_llama_gguf.h"

namespace {

using namespace qkv_test;

fs::path write_tiny(const fs::path& path, const TinySpec& spec = {}) {
  const std::vector<std::byte> bytes = tiny_llama(spec);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST_F(Cli, ChatTemplateFlagPicksABuiltInTemplate) {
  const fs::path with = write_tiny(dir_ / "tiny.gguf");
  const fs::path without = write_tiny(dir_ / "bare.gguf", {.drop_key = "tokenizer.chat_template"});
  const fs::path input = dir_ / "turns.txt";
  std::ofstream(input) << "ab\n";
  const std::string tail = "' --greedy --max-new-tokens 3 < '" + input.string() + "'";
  // The file's template, or a built-in one in its place.
  EXPECT_EQ(run_qkv("chat '" + with.string() + tail).exit_code, 0);
  const CliRun builtin =
      run_qkv("chat '" + without.string() + "' --chat-template chatml" + tail.substr(1));
  EXPECT_EQ(builtin.exit_code, 0) << builtin.output;
  expect_output_has(builtin, {"> "});
  expect_failure(run_qkv("chat '" + without.string() + tail),
                 {"has no chat template (tokenizer.chat_template): pass --chat-template NAME, "
                  "NAME one of chatml, gemma, llama3, qwen"});
  expect_failure(run_qkv("chat '" + with.string() + "' --chat-template vicuna" + tail.substr(1)),
                 {"no built-in chat template named \"vicuna\""});
}

}  // namespace
