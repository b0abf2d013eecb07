// qkv's Jinja interpreter by its pieces (lexer, parser, values, strings,
// evaluator), with expected texts worked out from Python's jinja2 (the
// oracle of python/tests/test_chat_template_jinja.py), and against hostile
// templates: each ends in a qkv::Error naming what went wrong, quickly,
// never a hang, a crash or all the memory (each within 10 s even under ASan; ~0.3 s in Release).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "text/jinja_evaluator.h"
#include "text/jinja_lexer.h"
#include "text/jinja_parser.h"
#include "text/jinja_strings.h"
#include "text/jinja_value.h"

namespace {

using namespace qkv::text::jinja;

std::string render_with(std::string_view source, Object variables, const Limits& limits = {}) {
  return render(parse(source, limits.max_parse_depth), variables, limits);
}

std::string render_text(std::string_view source) {
  Object variables{{"x", Value(Array{Value(1), Value(2), Value(3)})},
                   {"s", Value("hello")},
                   {"d", Value(Object{{"a", Value(1)}, {"b", Value("two")}})}};
  return render_with(source, std::move(variables));
}

// The message of the qkv::Error the template ends with ("" when none).
std::string error_of(std::string_view source, const Limits& limits = {}) {
  try {
    (void)render_with(source, {{"x", Value(Array{Value(1), Value(2)})}}, limits);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLexer, WhitespaceControlAsTransformersRendersIt) {
  // trim_blocks drops the newline after %}; lstrip_blocks the indent before {%.
  EXPECT_EQ(render_text("  {% if true %}\n  a\n  {% endif %}\n  {{ s }}  \n{# c #}\nb\n"),
            "  a\n  hello  \nb");
  EXPECT_EQ(render_text("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e"), "abc d e");
  // + keeps what lstrip_blocks and trim_blocks would drop.
  EXPECT_EQ(render_text("x\n  {%+ if true %}y{% endif %}\n  {% if true +%}\nz{% endif %}"),
            "x\n  y\nz");
  EXPECT_EQ(render_text("{% raw %}{{ s }}{% endraw %}"), "{{ s }}");
  // \r\n and \r are \n; one trailing newline goes.
  EXPECT_EQ(render_text("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(render_text("a\n\n"), "a\n");
}

TEST(JinjaLexer, StringEscapes) {
  const std::vector<Token> t = tokenize(R"({{ 'a\n\t\'\x41\u00e9\U0001F600\101\q' "b" }})");
  ASSERT_EQ(t[1].kind, TokenKind::kString);
  EXPECT_EQ(t[1].text,
            "a\n\t'A\xC3\xA9\xF0\x9F\x98\x80"
            "A\\q");
  EXPECT_EQ(t[2].text, "b");
  // Lines are counted for error messages.
  EXPECT_EQ(tokenize("a\nb\n{{ x }}")[2].line, 3);
}

TEST(JinjaParser, PrecedenceAsJinja2) {
  // A filter binds tighter than +, ~ looser than *, `not` looser than ==.
  EXPECT_EQ(render_text("{{ '[' + '  a  ' | trim + ']' }}"), "[a]");
  EXPECT_EQ(render_text("{{ 'a' ~ 2 * 3 }}"), "a6");
  EXPECT_EQ(render_text("{{ not 1 == 2 }} {{ x|length - 1 }} {{ -2 ** 2 }}"), "True 2 4");
  EXPECT_EQ(render_text("{{ 'y' if x|length > 2 else 'n' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
            "y True False");
  EXPECT_EQ(render_text("{{ s is string and d is mapping }} {{ d.c is not defined }}"),
            "True True");
}

TEST(JinjaValues, PrintedAsPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
  const Value v(Object{{"k", Value(Array{Value(None{}), Value(true), Value(1.5), Value("q's")})},
                       {"t", Value::tuple({Value(1)})}});
  EXPECT_EQ(to_output(v), "{'k': [None, True, 1.5, \"q's\"], 't': (1,)}");
  EXPECT_EQ(to_json(v), "{\"k\": [null, true, 1.5, \"q's\"], \"t\": [1]}");
  EXPECT_EQ(to_json(Value("\xC3\xA9\"\\\n\x01")), "\"\xC3\xA9\\\"\\\\\\n\\u0001\"");
  EXPECT_EQ(to_json(Value(Object{{"b", Value(Array{})}, {"a", Value(1)}}), 2, true),
            "{\n  \"a\": 1,\n  \"b\": []\n}");
  EXPECT_TRUE(equal(Value(1), Value(1.0)));
  EXPECT_TRUE(equal(Value(true), Value(1)));
  EXPECT_FALSE(equal(Value(Array{Value(1)}), Value::tuple({Value(1)})));
  EXPECT_FALSE(truthy(Value()));
  EXPECT_FALSE(truthy(Value("")));
  EXPECT_TRUE(truthy(Value(" ")));
}

TEST(JinjaStrings, PythonStrMethods) {
  // Python's whitespace includes U+00A0 and U+3000; lengths count characters.
  EXPECT_EQ(py_strip("\xC2\xA0 a b\xE3\x80\x80\n", std::nullopt, true, true), "a b");
  EXPECT_EQ(py_strip("xxaxx", std::string("x"), true, false), "axx");
  EXPECT_EQ(py_split(" a  b ", std::nullopt, -1), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(py_split("a b  c ", std::nullopt, 1), (std::vector<std::string>{"a", "b  c "}));
  EXPECT_EQ(py_split("a</think>b</think>", std::string("</think>"), -1),
            (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(char_count("a\xC3\xA9\xF0\x9F\x98\x80"), 3u);
  EXPECT_EQ(char_count("\xFF\xC3"), 2u);  // invalid bytes are characters of their own
  EXPECT_EQ(py_title("hello wORLD 2x"), "Hello World 2X");
  EXPECT_EQ(py_upper("\xC3\xA9"), "\xC3\x89");
  EXPECT_EQ(py_replace("ab", "", "-", -1), "-a-b-");
}

TEST(JinjaEvaluator, ScopesAndStatements) {
  // A set inside a loop lasts one iteration; namespaces carry values out.
  EXPECT_EQ(render_text("{% set a = 0 %}{% for i in x %}{% set a = i %}{{ a }}{% endfor %}{{ a }}"),
            "1230");
  EXPECT_EQ(render_text("{% for i in x %}{% if loop.first %}{% set a = 1 %}{% endif %}[{{ a }}]"
                        "{% endfor %}"),
            "[1][][]");
  EXPECT_EQ(render_text("{% set ns = namespace(n=0) %}{% for i in x %}{% set ns.n = ns.n + i %}"
                        "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render_text("{% for i in x %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.last }},"
                        "{% endfor %}"),
            "03False,12False,21True,");
  EXPECT_EQ(render_text("{% for i in x if i != 2 %}{{ i }}/{{ loop.length }} {% endfor %}"),
            "1/2 3/2 ");
  EXPECT_EQ(render_text("{% for i in x %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}"
                        "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}"),
            "1a1btwo");
  EXPECT_EQ(
      render_text("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"),
      "1B23");
  EXPECT_EQ(render_text("{% set t %}<{{ s }}>{% endset %}{{ t }}{{ x[::-1] }}{{ s[1:3] }}"),
            "<hello>[3, 2, 1]el");
  // jinja2's scopes: a name the top level assigns before reading it is
  // undefined in loops run before the assignment, unless only an if assigns it.
  EXPECT_EQ(render_text("{% for i in [1] %}[{{ s }}]{% endfor %}{% set s = 1 %}{{ s }}"), "[]1");
  EXPECT_EQ(render_text("{% if false %}{% set s = 1 %}{% endif %}[{{ s }}]"), "[hello]");
  EXPECT_EQ(render_text("[{{ s }}]{% for i in [1] %}[{{ s }}]{% endfor %}{% set s = 1 %}"),
            "[hello][hello]");
  // Undefined: empty when printed, an error when used.
  EXPECT_EQ(render_text("[{{ nope }}{{ d.nope }}{{ x[9] }}]{{ nope is defined }}"), "[]False");
}

TEST(JinjaEvaluator, ErrorsNameTheLine) {
  const std::string raised = error_of("a\n{{ raise_exception('Roles must alternate') }}");
  EXPECT_NE(raised.find("raised an exception (line 2): Roles must alternate"), std::string::npos)
      << raised;
  EXPECT_NE(error_of("\n\n{{ nope.attr }}").find("line 3: 'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand type(s) for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(error_of("{% if x %}").find("before {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("{% include %} statement is not supported"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x | nosuch }}").find("no filter named 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is nosuch }}").find("no test named 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ x.append(3) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns._p = 1 %}").find("underscore"),
            std::string::npos);
}

// A hostile template ends in an error containing `expected`, quickly (no hang).
void expect_refused(std::string_view source, std::string_view expected, const Limits& limits = {}) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of(source, limits);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find(expected), std::string::npos) << source.substr(0, 200) << " -> " << e;
  EXPECT_LT(seconds, 10.0) << source.substr(0, 200);  // generous for sanitizer builds
}

TEST(JinjaHostile, RunawayTemplatesEndInErrors) {
  Limits small;
  small.max_loop_iterations = 10'000;
  small.max_output_bytes = 1 << 20;
  small.max_work = 16 << 20;
  expect_refused(
      "{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      "loop iterations", small);
  expect_refused("{% for i in range(5000) %}{{ 'a' * 300 }}{% endfor %}", "rendered text is longer",
                 small);
  expect_refused("{{ 'a' * 100000000000 }}", "a string of more than");
  expect_refused("{{ [1] * 100000000000 }}", "a list of more than");
  expect_refused("{{ range(1000000000) | length }}", "range() of 1000000000 items");
  small.max_list_items = 10'000;  // small bounds keep sanitizer builds quick
  expect_refused("{{ ('a ' * 30000).split() | length }}", "a list of 10001 items", small);
  expect_refused("{{ ([1] * 9000 + [2] * 9000) | length }}", "a list of 18000 items", small);
  expect_refused("{% for c in 'a' * 5000000 %}{% endfor %}", "a string of more than 1000000");
  // Values that grow without being printed: the work bound.
  expect_refused(
      "{% set ns = namespace(s='a') %}{% for i in range(10000) %}"
      "{% set ns.s = ns.s + ns.s[:1000] %}{% endfor %}",
      "bytes of values", small);
  // Nesting: in the source, in values built, in macro calls.
  expect_refused("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}",
                 "nested deeper");
  expect_refused("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}",
                 "nested deeper");
  expect_refused("{{ " + std::string(100000, '-') + "1 }}", "nested deeper");
  expect_refused("{{ " + std::string(100000, '!') + " }}", "unexpected character '!'");
  expect_refused("{% for i in x %}" + std::string(5000, ' ') + "{% if 1 %}", "before {% endif %}");
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if 1 %}";
  expect_refused(deep_ifs, "nested deeper");
  expect_refused(
      "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}"
      "{% endfor %}{{ ns.v }}",
      "nest deeper than 64 levels");
  expect_refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nest");
  expect_refused("{% set ns = namespace() %}{% set ns.me = [ns] %}", "cannot hold a namespace");
  // Broken syntax, cut anywhere.
  const std::string good =
      "{% for m in x %}{{ m ~ '\\n' | trim }}{% if loop.last %}{# c #}{% endif %}{% endfor %}";
  for (size_t cut = 0; cut < good.size(); ++cut) (void)error_of(good.substr(0, cut));
}

TEST(JinjaHostile, RandomBytesNeverCrash) {
  // Tags, names and operators shuffled: parse and render end in text or qkv::Error.
  const std::vector<std::string> pieces = {
      "{{",   "}}",    "{%",     "%}",  "{#", "#}", "-",    "+",     "for",      "in",  "if",
      "else", "endif", "endfor", "set", "=",  "x",  "loop", ".",     "(",        ")",   "[",
      "]",    "{",     "}",      "'a'", "\"", "1",  "|",    "trim",  "is",       "not", "defined",
      ",",    ":",     " ",      "\n",  "~",  "*",  "**",   "macro", "endmacro", "raw"};
  std::mt19937 rng(39);
  for (int n = 0; n < 3000; ++n) {
    std::string source;
    const int length = 1 + static_cast<int>(rng() % 24);
    for (int k = 0; k < length; ++k) source += pieces[rng() % pieces.size()];
    try {
      (void)render_with(source, {{"x", Value(Array{Value(1)})}});
    } catch (const qkv::Error&) {
    }
  }
}

}  // namespace
