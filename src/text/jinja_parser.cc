// Jinja parser (see jinja_parser.h), after jinja2's grammar.
#include "text/jinja_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "qkv/error.h"
#include "text/jinja_lexer.h"
#include "text/jinja_scopes.h"

namespace qkv::text::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVariableBegin:
      return "'{{'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kString:
      return "a string";
    case TokenKind::kEnd:
      return "the end of the template";
    default:
      return "'" + t.text + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  Program run() {
    Program p;
    std::string end;
    p.body = body({}, end);
    return p;
  }

 private:
  // Nesting guard: statements and expressions deeper than max_depth_ are refused.
  struct Deeper {
    explicit Deeper(Parser& p) : parser(p) {
      QKV_CHECK(++parser.depth_ <= parser.max_depth_, "chat template line ", parser.peek().line,
                ": nested deeper than ", parser.max_depth_, " levels");
    }
    ~Deeper() { --parser.depth_; }
    Parser& parser;
  };

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::kValue, detail::concat("chat template line ", peek().line, ": ", what));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail("expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) fail("expected '%}', got " + describe(peek()));
    next();
  }

  static ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Statements up to a block tag named in `ends` (its name left in `end`, the
  // tag's remaining tokens unread), or the end of the template when `ends` is empty.
  Body body(std::initializer_list<std::string_view> ends, std::string& end) {
    Deeper guard(*this);
    Body out;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return out;
        const auto closing = std::find_if(ends.begin(), ends.end(),
                                          [](std::string_view e) { return e.starts_with("end"); });
        fail("the template ends before {% " + std::string(*closing) + " %}");
      }
      if (t.kind == TokenKind::kText) {
        Stmt s{StmtKind::kText, t.line};
        s.text = next().text;
        out.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVariableBegin) {
        next();
        Stmt s{StmtKind::kOutput, t.line};
        s.expr = tuple(true);
        if (peek().kind != TokenKind::kVariableEnd) fail("expected '}}', got " + describe(peek()));
        next();
        out.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        const std::string name = expect_name();
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          end = name;
          return out;
        }
        out.push_back(statement(name, t.line));
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  // A body closed by {% end_name %}, whose tag is consumed.
  Body closed_body(std::string_view end_name) {
    std::string end;
    Body b = body({end_name}, end);
    expect_block_end();
    return b;
  }

  Stmt statement(const std::string& name, int line) {
    if (name == "if") return if_statement(line);
    if (name == "for") return for_statement(line);
    if (name == "set") return set_statement(line);
    if (name == "macro") return macro_statement(line);
    if (name == "break" || name == "continue") {
      expect_block_end();
      return Stmt{name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line};
    }
    if (name == "generation") {  // transformers' assistant-mask extension: renders its body
      expect_block_end();
      Stmt s{StmtKind::kBlock, line};
      s.bodies.push_back(closed_body("endgeneration"));
      return s;
    }
    fail("the {% " + name + " %} statement is not supported in chat templates");
  }

  Stmt if_statement(int line) {
    Stmt s{StmtKind::kIf, line};
    while (true) {
      s.conditions.push_back(tuple(false));
      expect_block_end();
      std::string end;
      s.bodies.push_back(body({"elif", "else", "endif"}, end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s.else_body = closed_body("endif");
      } else {
        expect_block_end();
      }
      return s;
    }
  }

  // Names assigned by for and set: a, or a, b, or (a, b).
  std::vector<std::string> targets() {
    const bool parenthesized = skip_op("(");
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) {
      if (parenthesized && at_op(")")) break;
      names.push_back(expect_name());
    }
    if (parenthesized) expect_op(")");
    return names;
  }

  Stmt for_statement(int line) {
    Stmt s{StmtKind::kFor, line};
    s.targets = targets();
    if (!skip_name("in")) fail("expected 'in' in the for statement, got " + describe(peek()));
    s.expr = tuple(false, /*stop_at_if=*/true);
    if (skip_name("if")) s.filter = expression(true);
    if (at_name("recursive")) fail("recursive for loops are not supported in chat templates");
    expect_block_end();
    std::string end;
    s.bodies.push_back(body({"endfor", "else"}, end));
    expect_block_end();
    if (end == "else") s.else_body = closed_body("endfor");
    return s;
  }

  Stmt set_statement(int line) {
    if (peek().kind == TokenKind::kName && at_op(".", 1)) {
      Stmt s{StmtKind::kSet, line};
      s.targets.push_back(next().text);
      next();
      s.text = expect_name();
      expect_op("=");
      s.expr = tuple(true);
      expect_block_end();
      return s;
    }
    std::vector<std::string> names = targets();
    if (skip_op("=")) {
      Stmt s{StmtKind::kSet, line};
      s.targets = std::move(names);
      s.expr = tuple(true);
      expect_block_end();
      return s;
    }
    if (names.size() != 1) fail("a {% set %} block assigns one name");
    Stmt s{StmtKind::kSetBlock, line};
    s.targets = std::move(names);
    expect_block_end();
    s.bodies.push_back(closed_body("endset"));
    return s;
  }

  Stmt macro_statement(int line) {
    Stmt s{StmtKind::kMacro, line};
    s.text = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      if (!s.targets.empty()) expect_op(",");
      if (at_op(")")) break;
      s.targets.push_back(expect_name());
      s.defaults.push_back(skip_op("=") ? expression(true) : nullptr);
    }
    expect_op(")");
    expect_block_end();
    s.bodies.push_back(closed_body("endmacro"));
    return s;
  }

  // Expressions separated by commas: one alone is itself, more a tuple.
  ExprPtr tuple(bool with_condition, bool stop_at_if = false, bool parenthesized = false) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      const Token& t = peek();
      if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || at_op(")") ||
          (stop_at_if && at_name("if")))
        break;
      items.push_back(with_condition ? expression(true) : expression(false));
      if (at_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!parenthesized) fail("expected an expression, got " + describe(peek()));
    }
    ExprPtr e = make(ExprKind::kTuple, line);
    e->items = std::move(items);
    return e;
  }

  ExprPtr expression(bool with_condition) {
    Deeper guard(*this);
    return with_condition ? condition() : or_expr();
  }

  ExprPtr condition() {
    ExprPtr e = or_expr();
    while (at_name("if")) {
      const int line = next().line;
      ExprPtr c = make(ExprKind::kCondition, line);
      c->items.push_back(or_expr());
      c->items.push_back(std::move(e));
      c->items.push_back(skip_name("else") ? condition() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr e = make(ExprKind::kBinary, line);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  // operand (op operand)*, left-associative; `words`: the operators are names (and, or).
  ExprPtr left_associative(ExprPtr (Parser::*operand)(),
                           std::initializer_list<std::string_view> ops, bool words = false) {
    ExprPtr e = (this->*operand)();
    while (true) {
      const Token& t = peek();
      const bool matches = t.kind == (words ? TokenKind::kName : TokenKind::kOperator) &&
                           std::find(ops.begin(), ops.end(), t.text) != ops.end();
      if (!matches) return e;
      next();
      e = binary(t.text, std::move(e), (this->*operand)(), t.line);
    }
  }

  ExprPtr or_expr() { return left_associative(&Parser::and_expr, {"or"}, true); }
  ExprPtr and_expr() { return left_associative(&Parser::not_expr, {"and"}, true); }

  ExprPtr not_expr() {
    if (at_name("not")) {
      Deeper guard(*this);
      const int line = next().line;
      ExprPtr e = make(ExprKind::kUnary, line);
      e->name = "not";
      e->items.push_back(not_expr());
      return e;
    }
    return compare();
  }

  ExprPtr compare() {
    const int line = peek().line;
    ExprPtr first = math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = make(ExprKind::kCompare, line);
        e->items.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->items.push_back(math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr math1() { return left_associative(&Parser::concat, {"+", "-"}); }
  ExprPtr concat() { return left_associative(&Parser::math2, {"~"}); }
  ExprPtr math2() { return left_associative(&Parser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return left_associative(&Parser::unary_with_filters, {"**"}); }
  ExprPtr unary_with_filters() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    Deeper guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      e = make(ExprKind::kUnary, t.line);
      e->name = t.text;
      e->items.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kName: {
        next();
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value(None{});
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s = next().text;
        while (peek().kind == TokenKind::kString) s += next().text;  // 'a' 'b' is 'ab'
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenKind::kInteger: {
        next();
        int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
          fail("the integer " + t.text + " is out of range");
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value = Value(v);
        return e;
      }
      case TokenKind::kFloat: {
        next();
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = tuple(true, false, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[" || t.text == "{") {
          // [a, b, ...] or {k: v, ...}, a trailing comma allowed.
          const bool dict = next().text == "{";
          const std::string_view close = dict ? "}" : "]";
          ExprPtr e = make(dict ? ExprKind::kDict : ExprKind::kList, t.line);
          while (!at_op(close)) {
            if (!e->items.empty()) expect_op(",");
            if (at_op(close)) break;
            e->items.push_back(expression(true));
            if (!dict) continue;
            expect_op(":");
            e->items.push_back(expression(true));
          }
          expect_op(close);
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op(".")) {
        if (peek().kind == TokenKind::kInteger) {
          ExprPtr item = make(ExprKind::kItem, line);
          item->items.push_back(std::move(e));
          ExprPtr index = primary();
          item->items.push_back(std::move(index));
          e = std::move(item);
        } else {
          ExprPtr a = make(ExprKind::kAttribute, line);
          a->name = expect_name();
          a->items.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (skip_op("[")) {
        e = subscript(std::move(e), line);
      } else if (at_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr object, int line) {
    ExprPtr start;
    if (!at_op(":")) {
      start = expression(true);
      if (skip_op("]")) {
        ExprPtr item = make(ExprKind::kItem, line);
        item->items.push_back(std::move(object));
        item->items.push_back(std::move(start));
        return item;
      }
    }
    expect_op(":");
    ExprPtr s = make(ExprKind::kSlice, line);
    s->items.push_back(std::move(object));
    s->items.push_back(std::move(start));
    s->items.push_back(at_op(":") || at_op("]") ? nullptr : expression(true));
    if (skip_op(":"))
      s->items.push_back(at_op("]") ? nullptr : expression(true));
    else
      s->items.push_back(nullptr);
    expect_op("]");
    return s;
  }

  ExprPtr call(ExprPtr callee, int line) {
    ExprPtr c = make(ExprKind::kCall, line);
    c->items.push_back(std::move(callee));
    call_arguments(*c);
    return c;
  }

  // (a, b, name=c) into e.items (after what is there) and e.keywords.
  void call_arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!at_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (at_op(")")) break;
      if (at_op("*") || at_op("**")) fail("*args and **kwargs are not supported in chat templates");
      if (peek().kind == TokenKind::kName && at_op("=", 1)) {
        std::string name = next().text;
        next();
        e.keywords.emplace_back(std::move(name), expression(true));
      } else {
        if (!e.keywords.empty()) fail("a positional argument follows a keyword argument");
        e.items.push_back(expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op("|")) {
        ExprPtr f = make(ExprKind::kFilter, line);
        f->name = expect_name();
        while (skip_op(".")) f->name.append(".").append(expect_name());
        f->items.push_back(std::move(e));
        if (at_op("(")) call_arguments(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        ExprPtr t = make(ExprKind::kTest, line);
        t->negated = skip_name("not");
        t->name = expect_name();
        t->items.push_back(std::move(e));
        if (at_op("(")) {
          call_arguments(*t);
        } else {
          const Token& a = peek();
          const bool starts_argument =
              (a.kind == TokenKind::kName || a.kind == TokenKind::kString ||
               a.kind == TokenKind::kInteger || a.kind == TokenKind::kFloat || at_op("[") ||
               at_op("{")) &&
              !at_name("else") && !at_name("or") && !at_name("and");
          if (starts_argument) {
            if (at_name("is")) fail("tests cannot be chained with 'is'");
            t->items.push_back(postfix(primary()));
          }
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
};

}  // namespace

Program parse(std::string_view source, int max_depth) {
  Program program = Parser(tokenize(source), max_depth).run();
  find_names_that_start_undefined(program);
  return program;
}

}  // namespace qkv::text::jinja
