// The syntax tree of a Jinja template: expressions and statements, as the
// parser (jinja_parser.h) builds them and the evaluator (jinja_evaluator.h)
// walks them. One node type each, with a kind and the fields that kind uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace qkv::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // value
  kName,       // name
  kList,       // items
  kTuple,      // items (a list, as Python's tuples print only in repr)
  kDict,       // items: key, value, key, value, ...
  kAttribute,  // items[0].name
  kItem,       // items[0][items[1]]
  kSlice,      // items[0][items[1]:items[2]:items[3]] (null: absent)
  kCall,       // items[0](items[1..], keywords)
  kFilter,     // items[0] | name(items[1..], keywords)
  kTest,       // items[0] is [not] name(items[1..])
  kUnary,      // op ("not", "-", "+") items[0]
  kBinary,     // items[0] op items[1]: + - * / // % ** ~ and or
  kCompare,    // items[0] ops[0] items[1] ops[1] items[2] ...: == != < <= > >= in notin
  kCondition,  // items[1] if items[0] else items[2] (null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                 // kLiteral
  std::string name;            // kName, kAttribute, kFilter, kTest; op for kUnary/kBinary
  std::vector<ExprPtr> items;  // operands, arguments (entries may be null in kSlice/kCondition)
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // name=value arguments
  std::vector<std::string> ops;                           // kCompare
  bool negated = false;                                   // kTest
};

struct Stmt;
using Body = std::vector<Stmt>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conditions[i] -> bodies[i]; else_body
  kFor,       // for targets in expr [if filter]: body; else_body
  kSet,       // set targets = expr, or set target.attribute = expr
  kSetBlock,  // set targets[0] %}body{% endset
  kMacro,     // macro name(targets = defaults): body
  kBreak,
  kContinue,
  kBlock,  // a body of its own (generation blocks)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kText; kMacro: name; kSet: the attribute of `ns.attr =`
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
  ExprPtr filter;                    // kFor: `if` clause
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock; kMacro: parameter names
  std::vector<ExprPtr> defaults;     // kMacro: per parameter, null when none
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<Body> bodies;          // kIf: one per condition; kFor/kMacro/kSetBlock/kBlock: [0]
  Body else_body;                    // kIf, kFor
  // kFor, kMacro: names undefined when their scope starts (jinja_scopes.h).
  std::vector<std::string> starts_undefined;
};

}  // namespace qkv::text::jinja
