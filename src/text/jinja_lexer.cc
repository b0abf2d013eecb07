// Jinja tokenizer (see jinja_lexer.h), after jinja2's lexer rules.
#include "text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "qkv/error.h"
#include "text/basic_tokenizer.h"
#include "text/jinja_strings.h"

namespace qkv::text::jinja {

namespace {

// \r\n and \r become \n; one trailing \n goes (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int count_newlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// Bytes of whitespace (Python's) at the start of s.
size_t leading_space(std::string_view s) {
  return s.size() - py_strip(s, std::nullopt, true, false).size();
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A string literal's body with Python's escapes resolved (unknown ones kept).
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    const auto hex = [&](size_t digits) {
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        QKV_CHECK(i + k < body.size() && std::isxdigit(static_cast<unsigned char>(body[i + k])),
                  "chat template line ", line, ": truncated \\", e, " escape");
        const char h = body[i + k];
        cp = cp * 16 + (is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      QKV_CHECK(cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF), "chat template line ", line, ": \\",
                e, " escape of an invalid character");
      i += digits;
      detail::append_utf8(cp, out);
    };
    // The one-character escapes: \n \t \r \\ \' \" \a \b \f \v.
    static constexpr std::string_view kEscaped = "ntr\\'\"abfv", kMeaning = "\n\t\r\\'\"\a\b\f\v";
    if (const size_t k = kEscaped.find(e); k != std::string_view::npos) {
      out.push_back(kMeaning[k]);
      continue;
    }
    switch (e) {
      case '\n':
        break;  // a line continuation
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + (body[++i] - '0');
          detail::append_utf8(cp, out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t open = find_open(pos_);
      if (open == std::string::npos) {
        emit(TokenKind::kText, src_.substr(pos_), line_);
        line_ += count_newlines(std::string_view(src_).substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(pos_, open - pos_);
      const int text_line = line_;
      line_ += count_newlines(text);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone on its line.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const std::string_view tail = std::string_view(text).substr(line_start);
        if ((line_start > 0 || line_starting) && !tail.empty() &&
            leading_space(tail) == tail.size())
          text.resize(line_start);
      }
      if (!text.empty()) emit(TokenKind::kText, text, text_line);
      pos_ = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw_block(open)) {
        line_starting = last_end_had_newline_;
      } else {
        line_starting = tag(kind == '{');
      }
    }
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  // The next "{{", "{%" or "{#" at or after `from`.
  size_t find_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  void emit(TokenKind kind, std::string text, int line) {
    tokens_.push_back({kind, std::move(text), line});
  }

  // After a closing tag at pos_ (its `-` or `+` already seen): `strip` drops
  // all whitespace after it, `trim` one newline. Returns whether the consumed
  // text ended with a newline (jinja2's line_starting).
  bool after_end(bool strip, bool trim) {
    bool newline = false;
    if (strip) {
      const size_t n = leading_space(std::string_view(src_).substr(pos_));
      if (n > 0) newline = src_[pos_ + n - 1] == '\n';
      line_ += count_newlines(std::string_view(src_).substr(pos_, n));
      pos_ += n;
    } else if (trim && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      newline = true;
    }
    return newline;
  }

  bool comment() {
    const int start_line = line_;
    const size_t body = pos_;
    const size_t close = src_.find("#}", body);
    QKV_CHECK(close != std::string::npos, "chat template line ", start_line,
              ": a comment ({#) is never closed");
    line_ += count_newlines(std::string_view(src_).substr(body, close - body));
    const char sign = close > body ? src_[close - 1] : '\0';
    pos_ = close + 2;
    return after_end(sign == '-', sign != '+');
  }

  // {% raw %}...{% endraw %}: the text between them as it is. Returns false
  // (and consumes nothing) when the block tag at `open` is not `raw`.
  bool raw_block(size_t open) {
    size_t p = pos_ + leading_space(std::string_view(src_).substr(pos_));
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3])))
      return false;
    p += 3;
    p += leading_space(std::string_view(src_).substr(p));
    const bool strip = src_.compare(p, 3, "-%}") == 0;
    QKV_CHECK(strip || src_.compare(p, 2, "%}") == 0, "chat template line ", line_,
              ": expected %} after raw");
    pos_ = p + (strip ? 3 : 2);
    after_end(strip, false);  // jinja2 keeps the newline after {% raw %}
    // The first {% endraw %}, with its own whitespace control.
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t q = at + 2;
      const char sign = q < src_.size() ? src_[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      q += leading_space(std::string_view(src_).substr(q));
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += leading_space(std::string_view(src_).substr(q));
      const char end_sign = src_[q];
      const bool end_strip = end_sign == '-', end_keep = end_sign == '+';
      if (end_strip || end_keep) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, at - pos_);
      if (sign == '-') text = py_strip(text, std::nullopt, false, true);
      line_ += count_newlines(std::string_view(src_).substr(pos_, at - pos_));
      if (!text.empty()) emit(TokenKind::kText, text, line_);
      pos_ = q + 2;
      last_end_had_newline_ = after_end(end_strip, !end_keep);
      return true;
    }
    QKV_CHECK(false, "chat template line ", line_, ": {% raw %} is never closed by {% endraw %}");
    (void)open;
    return false;
  }

  // The tokens of a {{ }} or {% %} tag up to and including its end.
  bool tag(bool variable) {
    const int start_line = line_;
    emit(variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, "", line_);
    std::vector<char> brackets;  // open ( [ { inside the tag
    while (true) {
      QKV_CHECK(pos_ < src_.size(), "chat template line ", start_line, ": a ",
                variable ? "{{ tag is never closed by }}" : "{% tag is never closed by %}");
      const char c = src_[pos_];
      if (brackets.empty()) {
        // The end of the tag, with `-` (strip after) or `+` (keep, blocks only).
        const std::string_view end = variable ? "}}" : "%}";
        const bool signed_end =
            (c == '-' || (c == '+' && !variable)) && src_.compare(pos_ + 1, 2, end) == 0;
        if (signed_end || src_.compare(pos_, 2, end) == 0) {
          pos_ += signed_end ? 3 : 2;
          emit(variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", line_);
          return after_end(signed_end && c == '-', !variable && !(signed_end && c == '+'));
        }
      }
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        if (c == '\n') ++line_;
        ++pos_;
      } else if (is_digit(c)) {
        number();
      } else if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        emit(TokenKind::kName, src_.substr(start, pos_ - start), line_);
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        operator_token(brackets);
      }
    }
  }

  void number() {
    const size_t start = pos_;
    const auto digits = [&] {
      while (pos_ < src_.size() &&
             (is_digit(src_[pos_]) ||
              (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))))
        ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t q = pos_ + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        pos_ = q;
        digits();
        is_float = true;
      }
    }
    std::string text = src_.substr(start, pos_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? TokenKind::kFloat : TokenKind::kInteger, std::move(text), line_);
  }

  void string_literal(char quote) {
    const int start_line = line_;
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    QKV_CHECK(i < src_.size(), "chat template line ", start_line,
              ": a string literal is never closed");
    const std::string_view body = std::string_view(src_).substr(pos_ + 1, i - pos_ - 1);
    emit(TokenKind::kString, unescape(body, start_line), start_line);
    line_ += count_newlines(body);
    pos_ = i + 1;
  }

  void operator_token(std::vector<char>& brackets) {
    static constexpr const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                 "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                 "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};
    for (const char* op : kOperators) {
      const size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      const char c = op[0];
      if (n == 1 && (c == '(' || c == '[' || c == '{')) {
        brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
        QKV_CHECK(!brackets.empty(), "chat template line ", line_, ": unexpected '", c, "'");
        QKV_CHECK(brackets.back() == c, "chat template line ", line_, ": unexpected '", c,
                  "', expected '", brackets.back(), "'");
        brackets.pop_back();
      }
      emit(TokenKind::kOperator, op, line_);
      pos_ += n;
      return;
    }
    const unsigned char c = static_cast<unsigned char>(src_[pos_]);
    char shown[8];
    std::snprintf(shown, sizeof shown, (c >= 0x20 && c < 0x7F) ? "%c" : "\\x%02x", c);
    QKV_CHECK(false, "chat template line ", line_, ": unexpected character '", shown, "' in a tag");
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_end_had_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace qkv::text::jinja
