// nn::Module — what every qkv module has, as torch.nn.Module gives it.
//
// A module names its parameters and child modules once, in list_members();
// the core derives everything else from that list:
//
//   class Scale : public nn::ModuleBase<Scale> {
//    public:
//     Scale() : ModuleBase("Scale"), weight_(Tensor::ones({4})) {}
//    private:
//     void list_members(MemberList& m) override { m.parameter("weight", weight_); }
//     Tensor weight_;
//   };
//
//   Scale s;
//   s.state_dict();                     // {"weight": a view of weight_}
//   s.load_state_dict({{"weight", w}}); // strict: exact names and shapes
//   s.parameters();                     // weight with its gradient buffer, for optim::
//   s.eval();                           // children too
//   Scale copy = s.clone();             // a deep copy
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "qkv/generator.h"
#include "qkv/nn/parameter.h"
#include "qkv/nn/state_dict.h"
#include "qkv/precision.h"
#include "qkv/tensor.h"

namespace qkv::nn {

class ModuleWalk;  // module.cc's walks over a module tree

class Module {
 public:
  virtual ~Module() = default;

  // Every parameter (state_dict names, torch's order) with its gradient
  // buffer, allocated as zeros on first use; backward passes add into them.
  std::vector<Parameter> parameters();
  // Sets every allocated gradient buffer of the module and its children to 0.
  void zero_grad();

  // The module ("") and every descendant by its state_dict prefix
  // ("layers.0.attention.q_proj"), parents first, as torch's named_modules.
  // The pointers are into this module: valid while it lives and is not moved.
  std::vector<std::pair<std::string, Module*>> named_modules();

  // The parameters by torch's names and in its order. Shared, not copied:
  // changing an entry in place changes the module.
  StateDict state_dict() const;
  // torch's strict load: every name present with the module's shape and a
  // floating dtype (converted to the module's), no other name. Everything is
  // checked before anything is copied, so a failed load changes nothing.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // Dropout is active only in training mode (the default, as in torch). Both
  // apply to the children too.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Dropout randomness of the module and its children; nullptr means
  // default_generator(). The module keeps the pointer: keep `gen` alive.
  void set_generator(Generator* gen);
  Generator* generator() const { return generator_; }

  // The arithmetic of inference (precision.h), for the module and its
  // children: linear layers convert their weights once, now; attention
  // multiplies in bfloat16. Low precision is for inference: forward passes
  // that record for a backward need kFloat32. load_state_dict converts the
  // new weights again; other in-place changes to weights need another call.
  // A float64 module has no low precision: the call throws and changes nothing.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }

  // int8 calibration (SmoothQuant). While on, forward passes note, for every
  // linear map of the module and its children, the largest |x| seen in each
  // input feature (turning it on forgets earlier notes; off keeps them).
  // set_precision(kInt8) then moves range from those features into the
  // weights (smoothing_factors in qkv/linear.h), which tames the outlier
  // features that per-row int8 scales handle badly. Without notes, int8 has
  // no smoothing. Run a few typical inputs in float32 between on and off:
  //
  //   model.record_input_ranges();  model.forward(sample);  model.record_input_ranges(false);
  //   model.set_precision(Precision::kInt8);
  //
  // Not thread-safe while recording (forward passes write the notes).
  void record_input_ranges(bool on = true);
  bool is_recording_input_ranges() const { return recording_ranges_; }

  // The class name, as errors give it ("Linear").
  const char* type_name() const { return type_name_; }

 protected:
  // What list_members() is given: the module calls parameter() for each of
  // its tensors (undefined ones, such as a bias turned off, are skipped) and
  // module() for each child, in torch's registration order. A child listed
  // under the name "" adds its members without a prefix.
  class MemberList {
   public:
    virtual void parameter(const std::string& name, Tensor& value) = 0;
    virtual void module(const std::string& name, Module& child) = 0;

   protected:
    ~MemberList() = default;
  };

  explicit Module(const char* type_name) : type_name_(type_name) {}
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;

  // The one place a module names its state.
  virtual void list_members(MemberList& members) = 0;

  // The gradient buffer of this module's parameter `name` (its value: `value`),
  // allocated as zeros on first use; undefined when `value` is.
  Tensor grad_buffer(const std::string& name, const Tensor& value);

  // Called on the module after set_precision and after load_state_dict:
  // rebuild whatever it derives from its weights for precision(). Default: nothing.
  virtual void update_precision() {}

  // While recording input ranges: folds the max |x| of each input feature of
  // x [..., in] into the note of each of `weights` (the names of the weights x
  // is multiplied with). Otherwise does nothing.
  void note_input_range(std::initializer_list<const char*> weights, const Tensor& x) const;
  // The note of `weight`, [in] float32, or undefined when there is none.
  Tensor input_range(const char* weight) const;
  // The notes of `weights` merged (elementwise max): the range of an input
  // that several weights share, e.g. one x for the fused q/k/v product.
  // Undefined when none of them has a note.
  Tensor input_range(std::initializer_list<const char*> weights) const;

  // Throws when precision() is not kFloat32: `what` (e.g. "Linear::forward with
  // a record") needs float32 arithmetic.
  void check_float32_precision(const char* what) const;

  // After a copy: every parameter of the module and its children becomes a
  // copy of its own, and the gradient buffers are dropped.
  void make_parameters_own();

 private:
  friend class ModuleWalk;

  const char* type_name_;
  bool training_ = true;
  Generator* generator_ = nullptr;
  Precision precision_ = Precision::kFloat32;
  bool recording_ranges_ = false;
  // By weight name; replaced, never changed in place (copies may share them).
  mutable std::map<std::string, Tensor> input_ranges_;
  // Gradient buffers by the module's own parameter names.
  std::map<std::string, Tensor> grads_;
};

// A module without options (a stack of layers takes its layers' options).
struct NoOptions {};

// The base of a concrete module: its options (as the module completed them:
// defaults filled in) and a typed clone().
template <class Derived, class Options = NoOptions>
class ModuleBase : public Module {
 public:
  const Options& options() const requires(!std::is_same_v<Options, NoOptions>) { return options_; }

  // A deep copy: its own parameters, fresh gradients, the same mode and generator.
  Derived clone() const {
    Derived copy(static_cast<const Derived&>(*this));
    copy.make_parameters_own();
    return copy;
  }

 protected:
  explicit ModuleBase(const char* type_name, const Options& options = {})
      : Module(type_name), options_(options) {}

  Options options_;
};

}  // namespace qkv::nn
