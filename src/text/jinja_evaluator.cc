// Jinja template rendering (see jinja_evaluator.h).
#include "text/jinja_evaluator.h"

#include <algorithm>
#include <optional>

#include "qkv/error.h"
#include "text/jinja_builtins.h"
#include "text/jinja_operators.h"

namespace qkv::text::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

struct Frame {
  Object variables;
  bool macro_boundary = false;  // lookups go from here to the top-level frame
};

class Renderer {
 public:
  Renderer(const Object& variables, const Limits& limits)
      : budget_(limits), globals_(global_functions(budget_)) {
    frames_.push_back({variables, false});
  }

  std::string run(const Program& program) {
    const Body& body = program.body;
    declare_undefined(frames_.back().variables, program.starts_undefined);
    std::string out;
    out_ = &out;
    try {
      const Flow flow = exec(body);
      QKV_CHECK(flow == Flow::kNormal, "{% break %} or {% continue %} outside a for loop");
    } catch (const RaisedException& e) {
      throw Error(ErrorKind::kValue, detail::concat("chat template raised an exception (line ",
                                                    line_, "): ", e.what()));
    } catch (const Error& e) {
      throw Error(e.kind(), detail::concat("chat template line ", line_, ": ", e.what()));
    }
    return out;
  }

 private:
  void write(std::string_view text) {
    QKV_CHECK(out_->size() + text.size() <= budget_.limits().max_output_bytes,
              "the rendered text is longer than the limit of ", budget_.limits().max_output_bytes,
              " bytes");
    budget_.charge(text.size());
    out_->append(text);
  }

  Value lookup(const std::string& name) const {
    for (size_t k = frames_.size(); k-- > 0;) {
      for (const auto& [n, v] : frames_[k].variables)
        if (n == name) return v;
      if (frames_[k].macro_boundary && k > 0) k = 1;  // next: the top-level frame
    }
    for (const auto& [n, v] : globals_)
      if (n == name) return v;
    return Value(Undefined{"'" + name + "' is undefined"});
  }

  // jinja2's scope variables that start undefined (jinja_scopes.h).
  static void declare_undefined(Object& scope, const std::vector<std::string>& names) {
    for (const std::string& name : names)
      assign(scope, name, Value(Undefined{"'" + name + "' is undefined"}));
  }

  static void assign(Object& scope, const std::string& name, Value v) {
    for (auto& entry : scope)
      if (entry.first == name) {
        entry.second = std::move(v);
        return;
      }
    scope.emplace_back(name, std::move(v));
  }

  // targets = value: one name, or several unpacked from a sequence.
  void bind(Object& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(scope, targets[0], v);
      return;
    }
    const std::vector<Value> items = iterate(v);
    QKV_CHECK(items.size() == targets.size(),
              items.size() < targets.size() ? "not enough" : "too many",
              " values to unpack (expected ", targets.size(), ", got ", items.size(), ")");
    for (size_t i = 0; i < targets.size(); ++i) assign(scope, targets[i], items[i]);
  }

  Flow exec(const Body& body) {
    for (const Stmt& s : body) {
      line_ = s.line;
      const Flow flow = exec(s);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kText:
        write(s.text);
        return Flow::kNormal;
      case StmtKind::kOutput:
        write(to_output(eval(*s.expr)));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i]))) return exec(s.bodies[i]);
        return exec(s.else_body);
      case StmtKind::kFor:
        return exec_for(s);
      case StmtKind::kSet:
        exec_set(s);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string captured = capture(s.bodies[0]);
        assign(frames_.back().variables, s.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        define_macro(s);
        return Flow::kNormal;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kBlock:
        return exec(s.bodies[0]);
    }
    return Flow::kNormal;
  }

  // What `body` writes, as a string instead of output.
  std::string capture(const Body& body) {
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    try {
      exec(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return captured;
  }

  void exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (s.text.empty()) {
      bind(frames_.back().variables, s.targets, v);
      return;
    }
    const std::string& target = s.targets[0];
    const Value ns = lookup(target);
    QKV_CHECK_TYPE(ns.kind() == Kind::kNamespace, "cannot assign attribute '", s.text, "' of '",
                   target, "': it is a ", type_name(ns), ", not a namespace");
    QKV_CHECK(s.text[0] != '_',
              "chat templates cannot store underscore-prefixed attributes on a "
              "namespace, got '",
              s.text, "'");
    QKV_CHECK(!holds_namespace(v), "a namespace cannot hold a namespace");
    assign(ns.ns().attributes, s.text, std::move(v));
  }

  Flow exec_for(const Stmt& s) {
    const Value iterable = eval(*s.expr);
    std::vector<Value> items = iterate(iterable);
    if (s.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        budget_.iteration();
        frames_.push_back({});
        bind(frames_.back().variables, s.targets, item);
        const bool keep = truthy(eval(*s.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      frames_.push_back({});
      const Flow flow = exec(s.else_body);
      frames_.pop_back();
      return flow;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      budget_.iteration();
      frames_.push_back({});
      Object& scope = frames_.back().variables;
      declare_undefined(scope, s.starts_undefined);
      bind(scope, s.targets, items[i]);
      Object loop{{"index", Value(i + 1)},      {"index0", Value(i)},
                  {"revindex", Value(n - i)},   {"revindex0", Value(n - i - 1)},
                  {"first", Value(i == 0)},     {"last", Value(i == n - 1)},
                  {"length", Value(n)},         {"depth", Value(int64_t{1})},
                  {"depth0", Value(int64_t{0})}};
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[i + 1]);
      loop.emplace_back("cycle",
                        Value(Callable{"loop.cycle", [i](CallArgs& call) {
                                         QKV_CHECK(!call.positional.empty(),
                                                   "loop.cycle() needs arguments");
                                         return call.positional[i % call.positional.size()];
                                       }}));
      assign(scope, "loop", Value(std::move(loop)));
      Flow flow;
      try {
        flow = exec(s.bodies[0]);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    Renderer* self = this;
    assign(frames_.back().variables, s.text, Value(Callable{s.text, [self, macro](CallArgs& call) {
                                                              return self->call_macro(*macro, call);
                                                            }}));
  }

  Value call_macro(const Stmt& m, CallArgs& call) {
    QKV_CHECK(call_depth_ < budget_.limits().max_call_depth, "macro calls nest deeper than ",
              budget_.limits().max_call_depth, " levels");
    QKV_CHECK(call.positional.size() <= m.targets.size(), "macro '", m.text, "' takes ",
              m.targets.size(), " arguments, got ", call.positional.size());
    Frame frame{{}, true};
    declare_undefined(frame.variables, m.starts_undefined);
    for (size_t i = 0; i < m.targets.size(); ++i) {
      std::optional<Value> v;
      if (i < call.positional.size()) v = call.positional[i];
      for (const auto& [name, value] : call.keyword)
        if (name == m.targets[i]) {
          QKV_CHECK(!v, "macro '", m.text, "' got multiple values for '", name, "'");
          v = value;
        }
      if (!v)
        v = m.defaults[i] ? eval(*m.defaults[i])
                          : Value(Undefined{"parameter '" + m.targets[i] + "' was not provided"});
      assign(frame.variables, m.targets[i], *v);
    }
    for (const auto& [name, value] : call.keyword)
      QKV_CHECK(std::find(m.targets.begin(), m.targets.end(), name) != m.targets.end(), "macro '",
                m.text, "' has no parameter '", name, "'");
    const int saved_line = line_;
    ++call_depth_;
    frames_.push_back(std::move(frame));
    std::string result;
    try {
      result = capture(m.bodies[0]);
    } catch (...) {
      frames_.pop_back();
      --call_depth_;
      throw;
    }
    frames_.pop_back();
    --call_depth_;
    line_ = saved_line;
    return Value(std::move(result));
  }

  CallArgs arguments(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i]));
    for (const auto& [name, value] : e.keywords) args.keyword.emplace_back(name, eval(*value));
    return args;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.value;
      case ExprKind::kName:
        return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        Array items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item));
        return checked_container(e.kind == ExprKind::kTuple ? Value::tuple(std::move(items))
                                                            : Value(std::move(items)));
      }
      case ExprKind::kDict: {
        Object entries;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          QKV_CHECK_TYPE(key.is_string(), "dict keys must be strings in chat templates, got ",
                         type_name(key));
          assign(entries, key.string(), eval(*e.items[i + 1]));
        }
        return checked_container(Value(std::move(entries)));
      }
      case ExprKind::kAttribute:
        return get_attribute(eval(*e.items[0]), e.name, budget_);
      case ExprKind::kItem: {
        const Value object = eval(*e.items[0]);
        return get_item(object, eval(*e.items[1]), budget_);
      }
      case ExprKind::kSlice: {
        const Value object = eval(*e.items[0]);
        const auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k]) : Value(None{}); };
        const Value start = part(1), stop = part(2), step = part(3);
        return get_slice(object, start, stop, step, budget_);
      }
      case ExprKind::kCall: {
        const Value callee = eval(*e.items[0]);
        CallArgs args = arguments(e, 1);
        if (callee.is_undefined()) fail_undefined(callee);
        QKV_CHECK_TYPE(callee.kind() == Kind::kCallable, "'", type_name(callee),
                       "' object is not callable");
        line_ = e.line;
        return callee.callable().call(args);
      }
      case ExprKind::kFilter: {
        const Value input = eval(*e.items[0]);
        CallArgs args = arguments(e, 1);
        line_ = e.line;
        return apply_filter(e.name, input, args, budget_);
      }
      case ExprKind::kTest: {
        const Value input = eval(*e.items[0]);
        CallArgs args = arguments(e, 1);
        line_ = e.line;
        return Value(apply_test(e.name, input, args) != e.negated);
      }
      case ExprKind::kUnary: {
        const Value a = eval(*e.items[0]);
        if (e.name == "not") return Value(!truthy(a));
        return unary_operator(e.name, a);
      }
      case ExprKind::kBinary: {
        const Value a = eval(*e.items[0]);
        if (e.name == "and") return truthy(a) ? eval(*e.items[1]) : a;
        if (e.name == "or") return truthy(a) ? a : eval(*e.items[1]);
        const Value b = eval(*e.items[1]);
        line_ = e.line;
        return binary_operator(e.name, a, b, budget_);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          line_ = e.line;
          if (!compare_operator(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kCondition:
        if (truthy(eval(*e.items[0]))) return eval(*e.items[1]);
        return e.items[2] ? eval(*e.items[2]) : Value(Undefined{"the inline if had no else"});
    }
    return Value();
  }

  Value checked_container(Value v) {
    QKV_CHECK(v.depth() <= budget_.limits().max_value_depth, "lists and dicts nest deeper than ",
              budget_.limits().max_value_depth, " levels");
    budget_.charge(v.kind() == Kind::kArray ? v.array().size() : v.object().size());
    return v;
  }

  Budget budget_;
  Object globals_;
  std::vector<Frame> frames_;
  std::string* out_ = nullptr;
  int call_depth_ = 0;
  int line_ = 0;
};

}  // namespace

std::string render(const Program& program, const Object& variables, const Limits& limits) {
  return Renderer(variables, limits).run(program);
}

}  // namespace qkv::text::jinja
