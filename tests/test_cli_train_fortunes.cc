// `qkv train fortunes` on hand-made topic files (--dir): the output a user
// reads, and the errors. Learning itself is tested in test_fortunes_task.cc.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

using qkv_test::contains;
using qkv_test::run_qkv;

class TrainFortunes : public qkv_test::Cli {
 protected:
  // Three topics whose texts are told apart by their words.
  void write_topics() {
    const std::vector<std::pair<std::string, std::vector<std::string>>> topics = {
        {"cats", {"meow", "purr", "whiskers", "mouse"}},
        {"dogs", {"woof", "bark", "bone", "leash"}},
        {"birds", {"tweet", "nest", "wing", "feather"}}};
    const std::vector<std::string> filler = {"the", "a", "is", "on", "my", "old", "day", "so"};
    for (size_t t = 0; t < topics.size(); ++t) {
      std::ofstream out(dir_ / topics[t].first);
      for (int i = 0; i < 30; ++i) {
        if (i > 0) out << "%\n";
        out << filler[(i + t) % filler.size()] << " " << topics[t].second[i % 4] << " "
            << filler[(3 * i + 1) % filler.size()] << "\n\t\t-- " << topics[t].second[(i + 1) % 4]
            << "\n";
      }
    }
  }

  // `qkv train fortunes --dir <dir_> <args>`.
  qkv_test::CliRun train_fortunes(const std::string& args) const {
    return run_qkv("train fortunes --dir '" + dir_.string() + "' " + args);
  }
};

TEST_F(TrainFortunes, PrintsBothAccuraciesPerClassAndConfusionMatrices) {
  write_topics();
  const qkv_test::CliRun run = train_fortunes(
      "--topics cats,dogs,birds --epochs 3 --bow-epochs 3"
      " --d-model 16 --heads 2 --threads 1 --seed 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& text = run.output;
  for (const char* part :
       {"3 topics", "cats: 30 texts", "72 training and 18 held-out texts", "encoder       accuracy",
        "bag of words  accuracy", "Per-class accuracy", "Confusion matrix, encoder",
        "Confusion matrix, bag of words", "rows = true topic", "What to try next",
        "Where the encoder looks", "step", "held-out"})
    EXPECT_TRUE(contains(text, part)) << "missing '" << part << "' in:\n" << text;
  // Each confusion matrix has a row per topic, whose counts add up to the
  // topic's 6 held-out texts.
  for (const char* title : {"Confusion matrix, encoder", "Confusion matrix, bag of words"}) {
    const size_t at = text.find(title);
    ASSERT_NE(at, std::string::npos);
    std::istringstream rows(text.substr(text.find('\n', text.find('\n', at) + 1) + 1));
    for (const char* topic : {"cats", "dogs", "birds"}) {
      std::string name;
      int a = -1, b = -1, c = -1;
      rows >> name >> a >> b >> c;
      EXPECT_EQ(name, topic) << title << "\n" << text;
      EXPECT_EQ(a + b + c, 6) << title << " row " << topic << "\n" << text;
    }
  }
  // Piped: plain lines, no redrawing or colour.
  EXPECT_FALSE(contains(text, "\r")) << text;
  EXPECT_FALSE(contains(text, "\x1b[")) << text;
}

TEST_F(TrainFortunes, UnknownTopicIsAnErrorListingTheTopics) {
  write_topics();
  const qkv_test::CliRun run = train_fortunes("--topics cats,fish --epochs 1");
  expect_failure(run, {"unknown topic 'fish'", "birds, cats, dogs"});
  expect_output_lacks(run, {"accuracy"});
}

TEST_F(TrainFortunes, BadOptionsAreErrors) {
  write_topics();
  const qkv_test::CliRun one = train_fortunes("--topics cats");
  expect_failure(one, {"at least two topics"});
  const qkv_test::CliRun missing_dir =
      run_qkv("train fortunes --dir '" + (dir_ / "nowhere").string() + "' --topics a,b");
  expect_failure(missing_dir, {"nowhere"});
  // A missing pretrained model fails before any training.
  const qkv_test::CliRun no_model =
      train_fortunes("--topics cats,dogs --pretrained '" + (dir_ / "no-model").string() + "'");
  expect_failure(no_model, {"no-model"});
  expect_output_lacks(no_model, {"step"});
  const qkv_test::CliRun zero = run_qkv("train fortunes --epochs 0");
  expect_failure(zero, {"qkv train fortunes --help"});
  const qkv_test::CliRun help = run_qkv("train --help");
  expect_output_has(help, {"fortunes"});
}

}  // namespace
