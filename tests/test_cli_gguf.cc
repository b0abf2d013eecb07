// `qkv generate MODEL.gguf` and `qkv chat`, run as a user would: on a tiny llama GGUF
// file written here, and on SmolLM2 when scripts/fetch_model.sh has put it in models/.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_runner.h"
#include "kernels/quant_gemm.h"
#include "tiny_llama_gguf.h"

namespace {

using namespace qkv_test;

fs::path write_tiny(const fs::path& dir) {
  const fs::path path = dir / "tiny.gguf";
  const std::vector<std::byte> bytes = tiny_llama();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

fs::path write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

TEST_F(Cli, GenerateReadsGgufFiles) {
  const fs::path model = write_tiny(dir_);
  for (const char* mode : {"", " --exact"}) {
    const CliRun run = run_qkv("generate '" + model.string() +
                               "' --prompt ab --greedy --max-new-tokens 6 --stats" + mode);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    expect_output_has(run, {"ab", "prompt: 1 tokens", "tokens/s); generation: "});
  }
  // Same seed, same text; the fast mode has no other precision.
  const std::string args =
      "generate '" + model.string() + "' --prompt ab --max-new-tokens 8 --seed 3";
  EXPECT_EQ(run_qkv(args).output, run_qkv(args).output);
  expect_failure(run_qkv("generate '" + model.string() + "' --prompt ab --precision int8"),
                 {"--precision int8 needs --exact"});
}

// llama.cpp's short flags mean what they mean there, and give the same text
// as the long ones; the model may come positionally or after -m, not both.
TEST_F(Cli, GenerateTakesLlamaCppsShortFlags) {
  const fs::path model = write_tiny(dir_);
  const CliRun long_flags =
      run_qkv("generate '" + model.string() +
              "' --prompt ab --max-new-tokens 6 --temperature 0.9 --seed 5 --threads 1");
  const CliRun short_flags =
      run_qkv("generate -m '" + model.string() + "' -p ab -n 6 --temp 0.9 -s 5 -t 1 --min-p 0.05");
  EXPECT_EQ(long_flags.exit_code, 0) << long_flags.output;
  EXPECT_EQ(short_flags.output, long_flags.output);
  expect_failure(run_qkv("generate -p ab"), {"MODEL (or -m MODEL) is required"});
  expect_failure(run_qkv("generate '" + model.string() + "' -m '" + model.string() + "' -p ab"),
                 {"excludes"});
  expect_failure(run_qkv("generate '" + model.string() + "' -p ab --min-p 2"),
                 {"--min-p: 2 is not in [0, 1]"});
}

// A .gguf file too short for the magic is reported by the GGUF reader, not the safetensors one.
TEST_F(Cli, GenerateNamesAShortGgufFileAsGguf) {
  for (const char* bytes : {"", "GGU"}) {
    const fs::path model = write_text(dir_ / "short.gguf", bytes);
    const CliRun run = run_qkv("generate '" + model.string() + "' --prompt ab");
    expect_failure(
        run, {"invalid GGUF file '" + model.string() + "'", "the magic \"GGUF\" needs 4 bytes"});
    expect_output_lacks(run, {"safetensors"});
  }
}

TEST_F(Cli, ChatReadsTurnsFromStdin) {
  const fs::path model = write_tiny(dir_);
  const fs::path input = write_text(dir_ / "turns.txt", "a\n\nab c\n");
  const CliRun run = run_qkv("chat '" + model.string() +
                             "' --greedy --max-new-tokens 4 --stats < '" + input.string() + "'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  expect_output_has(run, {"tiny (fast mode)", "> ", "generation: "});
  // A file without GGUF magic is refused by name.
  const fs::path text = write_text(dir_ / "not.gguf", "hello");
  expect_failure(run_qkv("chat '" + text.string() + "' < '" + input.string() + "'"),
                 {"is not a GGUF file"});
}

// A message longer than the context is refused and the conversation goes on;
// when the turns outgrow the context (the tiny model holds 64 positions) the
// oldest leave; a reply stopped by --max-new-tokens is marked.
TEST_F(Cli, ChatSurvivesMessagesLongerThanTheContext) {
  const fs::path model = write_tiny(dir_);
  std::string turns = "hi\n" + std::string(100000, 'a') + "\n";
  for (int i = 0; i < 12; ++i) turns += "again\n";
  const fs::path input = write_text(dir_ / "turns.txt", turns);
  const CliRun run = run_qkv("chat '" + model.string() +
                             "' --greedy --max-new-tokens 5000 --context 64 < '" + input.string() +
                             "'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  expect_output_has(run, {"does not fit the context of 64 tokens",
                          "oldest messages left the conversation to fit the context of 64"});
  const CliRun capped = run_qkv("chat '" + model.string() + "' --greedy -n 1 < '" +
                                write_text(dir_ / "one.txt", "hi\n").string() + "'");
  EXPECT_EQ(capped.exit_code, 0) << capped.output;
  expect_output_has(capped, {"[reply cut at --max-new-tokens 1]"});
}

TEST_F(Cli, SmolLM2GeneratesAndChats) {
  if (!fs::exists(smollm2_path()))
    GTEST_SKIP() << smollm2_path() << " is missing: run scripts/fetch_model.sh";
  const CliRun gen = run_qkv("generate '" + smollm2_path().string() +
                             "' --prompt 'The capital of France is' --greedy --max-new-tokens 8");
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  expect_output_has(gen, {"The capital of France is", "Paris"});
  const fs::path input = write_text(dir_ / "turns.txt", "What is the capital of France?\n");
  const CliRun chat =
      run_qkv("chat '" + smollm2_path().string() +
              "' --greedy --max-new-tokens 24 --context 512 < '" + input.string() + "'");
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
  // The avx512_vnni kernels decode on x rounded to 8 bits per block, as
  // llama.cpp does, and then answer as llama.cpp (llama-cpp-python 0.3.36,
  // greedy: "L'Étoile, la Cité, la Nation, ..."); the float and the 16-bit x
  // (avx512_vnni16) kernels say Paris.
  const bool int8 = qkv::kernels::active_quant_kernels().x_bits == 8;
  expect_output_has(chat, {int8 ? "L'Étoile, la Cité" : "Paris"});
  expect_output_lacks(chat, {"<|im_end|>"});
}

}  // namespace
