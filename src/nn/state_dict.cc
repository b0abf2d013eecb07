#include "qkv/nn/state_dict.h"

#include "qkv/error.h"

namespace qkv::nn {

StateDict::StateDict(std::initializer_list<Entry> entries) {
  for (const Entry& e : entries) insert(e.first, e.second);
}

void StateDict::insert(const std::string& name, Tensor value) {
  QKV_CHECK(!contains(name), "StateDict: \"", name, "\" is there twice");
  index_[name] = entries_.size();
  entries_.emplace_back(name, std::move(value));
}

Tensor& StateDict::operator[](const std::string& name) {
  if (!contains(name)) insert(name, Tensor());
  return entries_[index_.at(name)].second;
}

size_t StateDict::erase(const std::string& name) {
  const auto it = index_.find(name);
  if (it == index_.end()) return 0;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].first] = i;
  return 1;
}

const Tensor& StateDict::at(const std::string& name) const {
  const auto it = index_.find(name);
  QKV_CHECK(it != index_.end(), "StateDict: no entry \"", name, "\"");
  return entries_[it->second].second;
}

StateDict::operator std::map<std::string, Tensor>() const {
  return std::map<std::string, Tensor>(entries_.begin(), entries_.end());
}

}  // namespace qkv::nn
