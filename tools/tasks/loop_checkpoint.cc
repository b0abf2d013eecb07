#include "tasks/loop_checkpoint.h"

#include <map>

#include "qkv/error.h"

namespace qkv::train {

void put_parameters(io::Checkpoint& checkpoint, const std::vector<nn::Parameter>& params) {
  for (const nn::Parameter& p : params) checkpoint.model[p.name] = p.value.clone();
}

void restore_parameters(const io::Checkpoint& checkpoint,
                        const std::vector<nn::Parameter>& params) {
  // Everything is checked before anything is copied.
  for (const nn::Parameter& p : params) {
    const auto it = checkpoint.model.find(p.name);
    QKV_CHECK(it != checkpoint.model.end(), "checkpoint: no model tensor \"", p.name,
              "\" (it holds ", checkpoint.model.size(), " tensors; this model has ", params.size(),
              " parameters)");
    QKV_CHECK(it->second.shape() == p.value.shape() && it->second.dtype() == p.value.dtype(),
              "checkpoint: model tensor \"", p.name, "\" is ", dtype_name(it->second.dtype()), " ",
              shape_str(it->second.shape()), ", this model's is ", dtype_name(p.value.dtype()), " ",
              shape_str(p.value.shape()));
  }
  // Entries "done.*" are the caller's (models of finished phases).
  size_t own = 0;
  for (const auto& [name, t] : checkpoint.model) own += !name.starts_with("done.");
  QKV_CHECK(own == params.size(), "checkpoint: ", own, " model tensors, this model has ",
            params.size(), " parameters");
  for (const nn::Parameter& p : params) {
    Tensor value = p.value;
    value.copy_from(checkpoint.model.at(p.name));
  }
}

void put_optimizer(io::Checkpoint& checkpoint, const std::string& name,
                   const optim::Optimizer& optimizer) {
  for (const auto& [key, t] : optimizer.state_dict()) checkpoint.optimizer[name + "." + key] = t;
}

void restore_optimizer(const io::Checkpoint& checkpoint, const std::string& name,
                       optim::Optimizer& optimizer) {
  const std::string prefix = name + ".";
  std::map<std::string, Tensor> state;
  for (const auto& [key, t] : checkpoint.optimizer)
    if (key.compare(0, prefix.size(), prefix) == 0) state[key.substr(prefix.size())] = t;
  try {
    optimizer.load_state_dict(state);
  } catch (const Error& e) {
    throw Error(e.kind(), detail::concat("checkpoint: optimizer \"", name, "\": ", e.what()));
  }
}

void put_generator(io::Checkpoint& checkpoint, const std::string& name, const Generator& gen) {
  checkpoint.metadata["rng." + name] = io::generator_state_text(gen);
}

void restore_generator(const io::Checkpoint& checkpoint, const std::string& name, Generator& gen) {
  const std::string key = "rng." + name;
  const auto it = checkpoint.metadata.find(key);
  QKV_CHECK(it != checkpoint.metadata.end(), "checkpoint: no metadata \"", key,
            "\" (the state of the random generator of ", name, ")");
  io::restore_generator_state(gen, it->second, "checkpoint: metadata \"" + key + "\"");
}

}  // namespace qkv::train
