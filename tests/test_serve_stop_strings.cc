// serve::StopStrings (tools/serve/): OpenAI's `stop` over text that arrives
// in pieces — nothing of a stop string is sent, nothing else is held back
// at the end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/stop_strings.h"

namespace {

using qkv::serve::StopStrings;

// Feeds `pieces` one by one; -> what was sent, with "|" after the last piece
// when a stop string ended the reply.
std::string run(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopStrings s(std::move(stops));
  std::string out;
  for (const std::string& piece : pieces) out += s.push(piece);
  return s.stopped() ? out + "|" : out + s.finish();
}

TEST(StopStrings, EndsBeforeTheFirstStopAcrossPieces) {
  EXPECT_EQ(run({"END"}, {"Hello E", "N", "D and more"}), "Hello |");
  EXPECT_EQ(run({"\n\n", "x"}, {"a\n", "\nb"}), "a|");
  EXPECT_EQ(run({"bc", "abcd"}, {"zabcd"}), "z|");  // the earliest match wins
}

TEST(StopStrings, ReleasesAPrefixThatDidNotBecomeAStop) {
  StopStrings s({"END"});
  EXPECT_EQ(s.push("the EN"), "the ");  // "EN" may begin END
  EXPECT_EQ(s.push("ds"), "ENds");
  EXPECT_EQ(s.push("E"), "");
  EXPECT_EQ(s.finish(), "E");
  EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, NoStopsPassEverything) { EXPECT_EQ(run({}, {"a", "", "b"}), "ab"); }

}  // namespace
