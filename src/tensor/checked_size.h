// Sizes, strides and byte counts that refuse to wrap around.
//
// A product of sizes past int64 (or a byte count past what a pointer can
// address) is undefined behaviour in C++ and, worse, a buffer smaller than
// the loops that fill it. Every allocation and view computes its numbers
// through these helpers, which throw qkv::Error naming `what` instead.
#pragma once

#include <cstdint>

#include "qkv/error.h"

namespace qkv::detail {

// a · b, or an Error "<what>: <a> x <b> overflows a 64-bit size".
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t product;
  QKV_CHECK(!__builtin_mul_overflow(a, b, &product), what, ": ", a, " x ", b,
            " overflows a 64-bit size");
  return product;
}

// a + b, or an Error as checked_mul's.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t sum;
  QKV_CHECK(!__builtin_add_overflow(a, b, &sum), what, ": ", a, " + ", b,
            " overflows a 64-bit size");
  return sum;
}

}  // namespace qkv::detail
