// One options object per call. python/qkv owns every signature and default:
// its functions and constructors take torch's arguments, convert what they
// convert, and pass all of a call's arguments to _core as one tuple, in the
// order of the Python signature. The bindings read that tuple here, field by
// field and in the same order, each read naming its argument, so that an
// error still says "f(): argument 'name' must be ..., got ...".
//
// Reads happen in the order they are written only across statements or
// within one braced list ({.a = r.integer("a"), .b = r.flag("b")}); two
// reads as arguments of one call may run in either order.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "qkv/generator.h"
#include "qkv/tensor.h"

namespace qkv::python {

class Options {
 public:
  // `options` must be a tuple; `function` names the call in errors.
  Options(py::handle options, const char* function);

  const char* function() const { return function_; }

  // The next field as it came from Python.
  py::handle next(const char* name);

  // The next field, converted (each as convert.h's function of that name).
  Tensor tensor(const char* name, Accept accept);
  Tensor optional_tensor(const char* name, Accept accept);  // None: undefined
  double number(const char* name);
  std::optional<double> optional_number(const char* name);
  int64_t integer(const char* name);
  std::optional<int64_t> optional_integer(const char* name);
  bool flag(const char* name);  // anything with a truth value, as bool(x)
  std::optional<bool> optional_flag(const char* name);
  std::string string(const char* name);
  DType dtype(const char* name);           // None: float32
  Generator* generator(const char* name);  // None or a qkv.Generator

  // Checks that every field was read: a mismatch between the Python call
  // site and the binding is a bug, reported as such.
  void done() const;

 private:
  py::handle tuple_;
  const char* function_;
  size_t index_ = 0;
};

// py::init from the one tuple: `read(Options&)` reads its fields, in order,
// and returns the object; `class_name` names the call in errors.
template <class Read>
auto init_from_tuple(const char* class_name, Read read) {
  return py::init([class_name, read](py::handle args) {
    Options a(args, class_name);
    auto made = read(a);
    a.done();
    return made;
  });
}

}  // namespace qkv::python
