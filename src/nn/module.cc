// nn::Module: everything derived from a module's list_members().
#include "qkv/nn/module.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "nn/module_util.h"
#include "qkv/error.h"

namespace qkv::nn {

namespace {

std::string joined(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

}  // namespace

// Calls `on_parameter(owner, own name, full name, value)` for every defined
// parameter of `root` and its children, and `on_module(module)` for `root` and
// every child, in torch's order.
class ModuleWalk final : public Module::MemberList {
 public:
  using OnParameter = std::function<void(Module& owner, const std::string& own_name,
                                         const std::string& full_name, Tensor& value)>;
  using OnModule = std::function<void(Module& module)>;
  using OnNamedModule = std::function<void(const std::string& name, Module& module)>;

  static void run_named(Module& root, const OnNamedModule& on_named) {
    const OnParameter no_parameter;  // the walk holds references: these must outlive it
    const OnModule no_module;
    ModuleWalk walk(root, "", no_parameter, no_module);
    walk.on_named_ = &on_named;
    on_named("", root);
    walk.list(root);
  }

  static void run(Module& root, const OnParameter& on_parameter, const OnModule& on_module = {}) {
    ModuleWalk walk(root, "", on_parameter, on_module);
    if (on_module) on_module(root);
    walk.list(root);
  }

  void parameter(const std::string& name, Tensor& value) override {
    if (value.defined() && on_parameter_) on_parameter_(owner_, name, joined(prefix_, name), value);
  }

  void module(const std::string& name, Module& child) override {
    ModuleWalk walk(child, joined(prefix_, name), on_parameter_, on_module_);
    walk.on_named_ = on_named_;
    if (on_module_) on_module_(child);
    if (on_named_) (*on_named_)(walk.prefix_, child);
    walk.list(child);
  }

 private:
  ModuleWalk(Module& owner, std::string prefix, const OnParameter& on_parameter,
             const OnModule& on_module)
      : owner_(owner),
        prefix_(std::move(prefix)),
        on_parameter_(on_parameter),
        on_module_(on_module) {}

  void list(Module& m) { m.list_members(*this); }

  Module& owner_;
  std::string prefix_;
  const OnParameter& on_parameter_;
  const OnModule& on_module_;
  const OnNamedModule* on_named_ = nullptr;
};

std::vector<Parameter> Module::parameters() {
  std::vector<Parameter> params;
  ModuleWalk::run(
      *this, [&](Module& owner, const std::string& own, const std::string& full, Tensor& value) {
        params.push_back({full, value, owner.grad_buffer(own, value)});
      });
  return params;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  ModuleWalk::run_named(*this,
                        [&](const std::string& name, Module& m) { out.emplace_back(name, &m); });
  return out;
}

void Module::zero_grad() {
  ModuleWalk::run(*this, {}, [](Module& m) {
    for (auto& [name, grad] : m.grads_) grad.fill(0.0);
  });
}

StateDict Module::state_dict() const {
  StateDict state;
  // The walk hands out mutable references; nothing here changes them.
  ModuleWalk::run(const_cast<Module&>(*this),
                  [&](Module&, const std::string&, const std::string& full, Tensor& value) {
                    state.insert(full, value);
                  });
  return state;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_strict(type_name_, state_dict(), state);
  std::vector<Module*> tree;
  ModuleWalk::run(*this, {}, [&](Module& m) { tree.push_back(&m); });
  for (auto m = tree.rbegin(); m != tree.rend(); ++m)  // children first, as in set_precision
    if ((*m)->precision_ != Precision::kFloat32) (*m)->update_precision();
}

void Module::set_precision(Precision precision) {
  const auto set = [](Module& root, Precision p) {
    std::vector<Module*> tree;  // parents before their children
    ModuleWalk::run(root, {}, [&](Module& m) {
      m.precision_ = p;
      tree.push_back(&m);
    });
    // Children first, so that a module's update_precision may then change
    // its children's precision (FeedForward's linear2 in int8).
    for (auto m = tree.rbegin(); m != tree.rend(); ++m) (*m)->update_precision();
  };
  const Precision before = precision_;
  try {
    set(*this, precision);
  } catch (...) {  // e.g. a float64 child: the whole tree stays as it was
    set(*this, before);
    throw;
  }
}

void Module::check_float32_precision(const char* what) const {
  QKV_CHECK(precision_ == Precision::kFloat32, what, " needs float32 arithmetic, but ", type_name_,
            " runs in ", precision_name(precision_),
            " (low precision is for inference; call set_precision(Precision::kFloat32) first)");
}

void Module::record_input_ranges(bool on) {
  ModuleWalk::run(*this, {}, [on](Module& m) {
    if (on && !m.recording_ranges_) m.input_ranges_.clear();
    m.recording_ranges_ = on;
  });
}

namespace {

// max_so_far[p] = max(max_so_far[p], seen[p]) for the [in] float32 ranges;
// a copy first, as the old note may be shared.
Tensor merge_ranges(const Tensor& max_so_far, const float* seen) {
  Tensor merged = max_so_far.clone();
  float* m = merged.data<float>();
  for (int64_t p = 0; p < merged.numel(); ++p) m[p] = std::max(m[p], seen[p]);
  return merged;
}

}  // namespace

void Module::note_input_range(std::initializer_list<const char*> weights, const Tensor& x) const {
  if (!recording_ranges_ || !x.defined() || x.dim() == 0) return;
  const int64_t in = x.size(-1);
  const Tensor rows = x.contiguous().to(DType::kFloat32).reshape({-1, in});
  const float* v = rows.data<float>();
  Tensor seen = Tensor::zeros({in}, DType::kFloat32);
  float* max = seen.data<float>();
  for (int64_t i = 0; i < rows.size(0); ++i)
    for (int64_t p = 0; p < in; ++p) max[p] = std::max(max[p], std::fabs(v[i * in + p]));
  for (const char* name : weights) {
    const auto it = input_ranges_.find(name);
    if (it == input_ranges_.end() || it->second.size(0) != in) {
      input_ranges_[name] = seen.clone();
      continue;
    }
    it->second = merge_ranges(it->second, max);
  }
}

Tensor Module::input_range(const char* weight) const {
  const auto it = input_ranges_.find(weight);
  return it == input_ranges_.end() ? Tensor() : it->second;
}

Tensor Module::input_range(std::initializer_list<const char*> weights) const {
  Tensor range;
  for (const char* name : weights) {
    const Tensor r = input_range(name);
    if (!r.defined()) continue;
    QKV_CHECK(!range.defined() || r.numel() == range.numel(), type_name(),
              ": input ranges of different widths cannot be merged: ", range.numel(), " and ",
              r.numel(), " (\"", name, "\")");
    range = range.defined() ? merge_ranges(range, r.data<float>()) : r;
  }
  return range;
}

void Module::train(bool on) {
  ModuleWalk::run(*this, {}, [on](Module& m) { m.training_ = on; });
}

void Module::set_generator(Generator* gen) {
  ModuleWalk::run(*this, {}, [gen](Module& m) { m.generator_ = gen; });
}

Tensor Module::grad_buffer(const std::string& name, const Tensor& value) {
  if (!value.defined()) return Tensor();
  Tensor& grad = grads_[name];
  if (!grad.defined()) grad = Tensor::zeros(value.shape(), value.dtype());
  return grad;
}

void Module::make_parameters_own() {
  // A tensor listed twice (tied weights) stays one tensor in the copy.
  std::vector<std::pair<Tensor, Tensor>> copies;  // original, its copy
  ModuleWalk::run(
      *this,
      [&](Module&, const std::string&, const std::string&, Tensor& value) {
        for (const auto& [original, copy] : copies)
          if (value.raw_data() == original.raw_data() && value.shape() == original.shape()) {
            value = copy;
            return;
          }
        copies.emplace_back(value, value.clone());
        value = copies.back().second;
      },
      [](Module& m) { m.grads_.clear(); });
}

}  // namespace qkv::nn
