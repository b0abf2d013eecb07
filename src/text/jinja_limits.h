// Bounds on what one render of a Jinja template may do, so that a hostile
// template (a chat template is part of a downloaded model file) ends with a
// clear qkv::Error instead of a hang, a crash or all the memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qkv/error.h"

namespace qkv::text::jinja {

struct Limits {
  size_t max_output_bytes = size_t{64} << 20;  // the rendered text, and any string built
  int64_t max_loop_iterations = 1'000'000;     // over the whole render
  int64_t max_range = 100'000;                 // range(): jinja2's sandbox bound (MAX_RANGE)
  int64_t max_list_items = 1'000'000;          // in any list built (split, +, *, ...)
  int max_call_depth = 64;                     // nested macro calls
  int max_value_depth = 64;                    // lists and dicts inside each other
  int max_parse_depth = 256;                   // nested statements and expressions
  // Bytes of strings plus items of lists and dicts built, over the whole
  // render: bounds the time of loops that build large values without output.
  int64_t max_work = int64_t{1} << 30;
};

// The running totals of one render against its Limits.
class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }

  // A value of `units` bytes or items was built.
  void charge(size_t units) {
    work_ += static_cast<int64_t>(units);
    QKV_CHECK(work_ <= limits_.max_work, "the template builds more than ", limits_.max_work,
              " bytes of values (a runaway loop?)");
  }
  // A string of `size` bytes is about to be built.
  void check_string(size_t size) const {
    QKV_CHECK(size <= limits_.max_output_bytes, "the template builds a string of ", size,
              " bytes, more than the limit of ", limits_.max_output_bytes);
  }
  // A list of `items` is about to be built.
  void check_list(size_t items) const {
    QKV_CHECK(static_cast<int64_t>(items) <= limits_.max_list_items,
              "the template builds a list of ", items, " items, more than the limit of ",
              limits_.max_list_items);
  }
  void iteration() {
    QKV_CHECK(++iterations_ <= limits_.max_loop_iterations, "the template runs more than ",
              limits_.max_loop_iterations, " loop iterations");
  }

 private:
  Limits limits_;  // a copy: a Budget outlives the Limits it was made from
  int64_t work_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace qkv::text::jinja
