// Names a Jinja scope assigns before reading them (see jinja_scopes.h).
#include "text/jinja_scopes.h"

#include <algorithm>
#include <set>
#include <string>

namespace qkv::text::jinja {

namespace {

using Names = std::set<std::string>;

void loads_of(const Expr* e, Names& out) {
  if (!e) return;
  if (e->kind == ExprKind::kName) out.insert(e->name);
  for (const ExprPtr& item : e->items) loads_of(item.get(), out);
  for (const auto& keyword : e->keywords) loads_of(keyword.second.get(), out);
}

class Scope {
 public:
  // `outer`: every name the enclosing scopes mention; `declared`: the
  // scope's own parameters (loop targets, loop, macro parameters).
  Scope(const Names& outer, const Names& declared) : outer_(outer), seen_(declared) {}

  // The scope's statements, in document order; nested scopes are collected
  // to be resolved once this scope's names are all known.
  void walk(Body& body, bool conditional) {
    for (Stmt& s : body) {
      switch (s.kind) {
        case StmtKind::kOutput:
          load(s.expr.get());
          break;
        case StmtKind::kIf:
          for (const ExprPtr& c : s.conditions) load(c.get());
          for (Body& b : s.bodies) walk(b, true);
          walk(s.else_body, true);
          break;
        case StmtKind::kFor:
          load(s.expr.get());
          nested_.push_back(&s);
          break;
        case StmtKind::kSet:
          load(s.expr.get());
          if (!s.text.empty()) {
            seen_.insert(s.targets[0]);  // ns.attribute = ...: reads ns
          } else {
            for (const std::string& t : s.targets) store(t, conditional);
          }
          break;
        case StmtKind::kSetBlock:
          store(s.targets[0], conditional);
          break;
        case StmtKind::kMacro:
          store(s.text, conditional);
          nested_.push_back(&s);
          break;
        case StmtKind::kBlock:
          walk(s.bodies[0], conditional);
          break;
        default:
          break;
      }
    }
  }

  std::vector<std::string> starts_undefined() const {
    return {starts_undefined_.begin(), starts_undefined_.end()};
  }

  // The loops and macros inside, each a scope whose outer names are these.
  void resolve_nested() {
    Names outer = outer_;
    outer.insert(seen_.begin(), seen_.end());
    for (Stmt* s : nested_) {
      Names declared(s->targets.begin(), s->targets.end());
      if (s->kind == StmtKind::kFor) declared.insert("loop");
      Scope inner(outer, declared);
      if (s->kind == StmtKind::kFor) inner.load(s->filter.get());
      inner.walk(s->bodies[0], false);
      s->starts_undefined = inner.starts_undefined();
      inner.resolve_nested();
      if (s->kind == StmtKind::kFor) {
        Scope otherwise(outer, {});
        otherwise.walk(s->else_body, false);
        otherwise.resolve_nested();
      }
    }
  }

 private:
  void load(const Expr* e) { loads_of(e, seen_); }

  void store(const std::string& name, bool conditional) {
    if (!seen_.insert(name).second) return;
    if (!conditional && !outer_.count(name)) starts_undefined_.insert(name);
  }

  const Names& outer_;
  Names seen_;
  Names starts_undefined_;
  std::vector<Stmt*> nested_;
};

}  // namespace

void find_names_that_start_undefined(Program& program) {
  const Names none;
  Scope top(none, {});
  top.walk(program.body, false);
  program.starts_undefined = top.starts_undefined();
  top.resolve_nested();
}

}  // namespace qkv::text::jinja
