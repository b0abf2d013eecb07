// serve::StopStrings — OpenAI's `stop`: the reply ends before the first
// occurrence of any of the stop strings, which is not sent. Text arrives in
// pieces (one token's worth at a time), so a piece that might be the start
// of a stop string is held back until the next pieces settle it.
//
//   StopStrings stops({"\n\n", "END"});
//   std::string out = stops.push("Hello EN");   // "Hello " ("EN" held back)
//   out = stops.push("D of it");                // "" and stopped() is true
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::serve {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // The text that is now certain to be part of the reply. After a stop
  // string is found, stopped() is true and every later push returns "".
  std::string push(std::string_view piece);

  // What is held back, at the end of the reply (no stop string came).
  std::string finish();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text not yet sent: it may begin a stop string
  bool stopped_ = false;
};

}  // namespace qkv::serve
