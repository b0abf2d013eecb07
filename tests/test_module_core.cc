// nn::Module: what the core derives from a module's list_members(), on a
// small module written here and on the library's own.
#include <gtest/gtest.h>

#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/transformer.h"
#include "test_util.h"

namespace qkv::nn {
namespace {

using qkv_test::expect_error;

// y = scale ⊙ proj(x), with the projection's weight optionally tied to a
// second name ("head.weight"), as a tied embedding/output pair is.
class Scaled : public ModuleBase<Scaled> {
 public:
  explicit Scaled(bool tied, Generator* gen)
      : ModuleBase("Scaled"), proj_({.in_features = 3, .out_features = 2}, gen), tied_(tied) {
    scale_ = Tensor::ones({2});
  }
  Linear& proj() { return proj_; }
  const Tensor& scale() const { return scale_; }

 protected:
  void list_members(MemberList& m) override {
    m.parameter("scale", scale_);
    m.module("proj", proj_);
    if (tied_) {
      Tensor head = proj_.weight();
      m.parameter("head.weight", head);
    }
  }

 private:
  Tensor scale_;
  Linear proj_;
  bool tied_;
};

std::vector<std::string> names_of(const StateDict& state) {
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  return names;
}

TEST(ModuleCore, StateDictListsOwnParametersThenChildrenInRegistrationOrder) {
  Generator gen(1);
  Scaled m(false, &gen);
  EXPECT_EQ(names_of(m.state_dict()),
            (std::vector<std::string>{"scale", "proj.weight", "proj.bias"}));
  // Shared, not copied.
  EXPECT_TRUE(m.state_dict().at("proj.weight").shares_storage_with(m.proj().weight()));
  // The same names, in the same order, as parameters().
  std::vector<std::string> params;
  for (const Parameter& p : m.parameters()) params.push_back(p.name);
  EXPECT_EQ(params, names_of(m.state_dict()));
}

TEST(ModuleCore, LoadStateDictIsStrictAndChangesNothingOnFailure) {
  Generator gen(2);
  Scaled m(false, &gen);
  const std::vector<double> before = m.proj().weight().to_vector();
  std::map<std::string, Tensor> state = m.state_dict();
  state["proj.weight"] = Tensor::zeros({2, 3});
  state["scale"] = Tensor::zeros({3});  // wrong shape: checked before anything is copied
  expect_error([&] { m.load_state_dict(state); },
               {"Scaled::load_state_dict", "size mismatch for \"scale\"", "[2]", "[3]"});
  EXPECT_EQ(m.proj().weight().to_vector(), before);
  state.erase("scale");
  state["extra"] = Tensor::zeros({1});
  expect_error([&] { m.load_state_dict(state); }, {"missing key(s) in state_dict: \"scale\"",
                                                   "unexpected key(s) in state_dict: \"extra\""});
  state.erase("extra");
  state["scale"] = Tensor::full({2}, 3.0, DType::kFloat64);  // converted to the module's dtype
  m.load_state_dict(state);
  EXPECT_EQ(m.scale().to_vector(), (std::vector<double>{3.0, 3.0}));
  EXPECT_EQ(m.proj().weight().to_vector(), std::vector<double>(6, 0.0));
}

TEST(ModuleCore, GradientsAreSharedAndZeroedThroughTheTree) {
  Generator gen(3);
  Scaled m(false, &gen);
  LinearRecord rec;
  const Tensor x = Tensor::randn({4, 3}, gen);
  m.proj().forward(x, &rec);
  m.proj().backward(Tensor::ones({4, 2}), rec);
  std::vector<Parameter> params = m.parameters();
  ASSERT_EQ(params.size(), 3u);
  // proj.bias's gradient is the sum of the output gradients over the batch.
  EXPECT_EQ(params[2].grad.to_vector(), (std::vector<double>{4.0, 4.0}));
  EXPECT_EQ(params[0].grad.to_vector(), (std::vector<double>{0.0, 0.0}));  // scale: untouched
  m.zero_grad();
  EXPECT_EQ(params[2].grad.to_vector(), (std::vector<double>{0.0, 0.0}));
}

TEST(ModuleCore, TrainEvalAndGeneratorReachEveryChild) {
  Generator gen(4);
  TransformerEncoder enc(
      {.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 8}, .num_layers = 2, .norm = true},
      &gen);
  EXPECT_TRUE(enc.is_training());
  enc.eval();
  EXPECT_FALSE(enc.is_training());
  for (TransformerEncoderLayer& layer : enc.layers()) {
    EXPECT_FALSE(layer.is_training());
    EXPECT_FALSE(layer.self_attn().is_training());
  }
  Generator drop(5);
  enc.set_generator(&drop);
  for (TransformerEncoderLayer& layer : enc.layers()) {
    EXPECT_EQ(layer.generator(), &drop);
    EXPECT_EQ(layer.self_attn().generator(), &drop);
  }
}

TEST(ModuleCore, CloneIsDeepKeepsModeAndKeepsTiedTensorsTied) {
  Generator gen(6);
  Scaled m(true, &gen);
  m.eval();
  Scaled copy = m.clone();
  EXPECT_FALSE(copy.is_training());
  EXPECT_FALSE(copy.proj().is_training());
  const StateDict a = m.state_dict(), b = copy.state_dict();
  ASSERT_EQ(names_of(a), names_of(b));
  for (const auto& [name, t] : a) {
    EXPECT_FALSE(t.shares_storage_with(b.at(name))) << name;
    EXPECT_EQ(t.to_vector(), b.at(name).to_vector()) << name;
  }
  // The tie survives the copy: one tensor under two names.
  EXPECT_TRUE(b.at("head.weight").shares_storage_with(b.at("proj.weight")));
  Tensor(b.at("proj.weight")).fill(7.0);
  EXPECT_EQ(b.at("head.weight").to_vector(), std::vector<double>(6, 7.0));
  EXPECT_NE(a.at("proj.weight").to_vector(), std::vector<double>(6, 7.0));
}

TEST(ModuleCore, StateDictKeepsInsertionOrderAndLooksUpByName) {
  StateDict s{{"b", Tensor::zeros({1})}, {"a", Tensor::ones({2})}};
  EXPECT_EQ(names_of(s), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(s.at("a").numel(), 2);
  EXPECT_EQ(s.count("c"), 0u);
  expect_error([&] { s.at("c"); }, "no entry \"c\"");
  expect_error([&] { s.insert("a", Tensor()); }, "\"a\" is there twice");
  s["c"] = Tensor::zeros({3});
  EXPECT_EQ(names_of(s), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(s.erase("b"), 1u);
  EXPECT_EQ(s.erase("b"), 0u);
  EXPECT_EQ(s.at("c").numel(), 3);
  const std::map<std::string, Tensor> sorted = s;
  EXPECT_EQ(sorted.begin()->first, "a");
}

// Notes of input ranges: the max |x| per input feature over every recorded
// forward, merged over several weights (elementwise max) on request.
class RangeNotes : public ModuleBase<RangeNotes> {
 public:
  RangeNotes() : ModuleBase("RangeNotes") {}
  void see(std::initializer_list<const char*> weights, const Tensor& x) const {
    note_input_range(weights, x);
  }
  using Module::input_range;

 protected:
  void list_members(MemberList&) override {}
};

TEST(ModuleCore, InputRangesAreMaxAbsPerFeatureMergedOnRequest) {
  RangeNotes m;
  const Tensor x1 = Tensor::from_vector({2, 3}, std::vector<float>{1, -4, 2, -0.5f, 3, 1});
  const Tensor x2 = Tensor::from_vector({1, 3}, std::vector<float>{-2, 1, 0});
  m.see({"a"}, x1);  // not recording: nothing noted
  EXPECT_FALSE(m.input_range("a").defined());
  m.record_input_ranges();
  m.see({"a", "b"}, x1);
  m.see({"b"}, x2);
  m.see({"c"}, Tensor::ones({1, 2}));
  m.record_input_ranges(false);
  auto values = [](const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  EXPECT_EQ(values(m.input_range("a")), (std::vector<float>{1.0f, 4.0f, 2.0f}));
  EXPECT_EQ(values(m.input_range("b")), (std::vector<float>{2.0f, 4.0f, 2.0f}));
  EXPECT_EQ(values(m.input_range({"a", "b", "missing"})), (std::vector<float>{2.0f, 4.0f, 2.0f}));
  EXPECT_FALSE(m.input_range({"missing"}).defined());
  // Merging does not change the notes it reads.
  EXPECT_EQ(values(m.input_range("a")), (std::vector<float>{1.0f, 4.0f, 2.0f}));
  expect_error([&] { m.input_range({"a", "c"}); }, {"RangeNotes", "different widths", "3 and 2"});
  // A new recording starts from nothing.
  m.record_input_ranges();
  m.record_input_ranges(false);
  EXPECT_FALSE(m.input_range("a").defined());
}

}  // namespace
}  // namespace qkv::nn
