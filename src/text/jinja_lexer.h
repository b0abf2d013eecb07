// Jinja source -> tokens, with the whitespace rules transformers renders chat
// templates under: trim_blocks (the newline after a block or comment tag is
// dropped), lstrip_blocks (spaces and tabs before a block or comment tag on its
// own line are dropped), `{%-`/`-%}`/`{{-`/`-}}` (all whitespace before/after
// dropped), `+` to keep it; line breaks become \n and one trailing \n of the
// source is dropped, as jinja2 does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::text::jinja {

enum class TokenKind {
  kText,           // template data between tags
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text: the literal's value, escapes resolved
  kInteger,  // text: the digits, '_' removed
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : | ;
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;  // 1-based, of the token's start in the source
};

// Throws qkv::Error naming the line for an unterminated tag, comment or
// string, or a character no token starts with.
std::vector<Token> tokenize(std::string_view source);

}  // namespace qkv::text::jinja
