// Errors of many elements, each against its own bound: the largest, the mean
// and the worst share of the bound, for the summaries the bf16 attention tests
// print (tests/test_bf16_attention*.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace qkv_test {

struct BoundedErrors {
  double max_abs = 0.0, sum_abs = 0.0, worst_of_bound = 0.0;
  int64_t count = 0;

  // One element's |error| and its bound.
  void add(double err, double bound) {
    max_abs = std::max(max_abs, err);
    sum_abs += err;
    ++count;
    if (bound > 0) worst_of_bound = std::max(worst_of_bound, err / bound);
  }
};

}  // namespace qkv_test
