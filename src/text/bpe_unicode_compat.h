// Where Hugging Face tokenizers' regex classes \p{L} and \p{N} (Oniguruma
// with Unicode 16 tables; Rust's char::is_numeric for Digits) and utf8proc
// disagree: the letters and digits new in Unicode 16 (17 for Rust),
// unassigned (Cn) for utf8proc. Found by comparing the pre-tokenizers on every code point;
// python/tests/test_bpe_parity.py repeats that check.
#pragma once

#include "text/unicode_compat.h"

namespace qkv::text::detail {

// \p{L} for tokenizers, not L* in utf8proc.
constexpr Range kOnigLetterExtra[] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x11380, 0x11389},
    {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7},
    {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0}, {0x13460, 0x143FA},
    {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF}, {0x1E5D0, 0x1E5ED},
    {0x1E5F0, 0x1E5F0}, {0x2EBF0, 0x2EE5D}};

// \p{N} for tokenizers, not N* in utf8proc.
constexpr Range kOnigNumberExtra[] = {{0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9},
                                      {0x16130, 0x16139}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9},
                                      {0x1E5F1, 0x1E5FA}};

// Numeric for Rust's char::is_numeric (Unicode 17; tokenizers' Digits) on
// top of the \p{N} above.
constexpr Range kRustNumericExtra[] = {{0x11DE0, 0x11DE9}, {0x16FF4, 0x16FF6}};

}  // namespace qkv::text::detail
