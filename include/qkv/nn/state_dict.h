// nn::StateDict — a module's tensors by name, in torch's order.
//
// torch lists a module's own parameters in the order they were registered,
// then each child's (prefixed "child."), recursively; StateDict keeps that
// order and looks names up like a map:
//
//   nn::StateDict state = layer.state_dict();
//   for (const auto& [name, t] : state) ...   // "self_attn.in_proj_weight", ...
//   state.at("linear1.weight");               // a view of the module's tensor
//   std::map<std::string, Tensor> sorted = state;   // by name, if wanted
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  StateDict() = default;
  StateDict(std::initializer_list<Entry> entries);

  // Appends `name` (an error if it is already there).
  void insert(const std::string& name, Tensor value);
  // The tensor of `name`, appended (undefined) when missing, as std::map's.
  Tensor& operator[](const std::string& name);
  // The tensor of `name`; an error naming it when missing.
  const Tensor& at(const std::string& name) const;
  // Removes `name`; returns how many entries went (0 or 1), as std::map's.
  size_t erase(const std::string& name);
  size_t count(const std::string& name) const { return index_.count(name); }
  bool contains(const std::string& name) const { return count(name) != 0; }

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }
  // Entries whose tensors may be replaced (their names stay as they are).
  std::vector<Entry>::iterator begin() { return entries_.begin(); }
  std::vector<Entry>::iterator end() { return entries_.end(); }

  // The same entries sorted by name.
  operator std::map<std::string, Tensor>() const;

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;  // name -> position in entries_
};

}  // namespace qkv::nn
