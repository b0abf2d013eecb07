// Checkpoints as safetensors files: "model." and "optimizer." tensors plus
// "qkv.*" metadata, written through save_safetensors (atomic and streamed).
#include "qkv/io/checkpoint.h"

#include <bit>
#include <charconv>
#include <cstdio>
#include <optional>
#include <sstream>
#include <vector>

#include "qkv/io/safetensors.h"

namespace qkv::io {

namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kFormatKey = "qkv.format";
constexpr const char* kVersionKey = "qkv.format_version";
constexpr const char* kStepKey = "qkv.step";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint) {
  const char* fn = "save_checkpoint";
  QKV_CHECK(checkpoint.step >= 0, fn, ": step must be >= 0, got ", checkpoint.step);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : checkpoint.model) tensors[kModelPrefix + name] = t;
  for (const auto& [name, t] : checkpoint.optimizer) tensors[kOptimizerPrefix + name] = t;
  SafetensorsMetadata metadata;
  for (const auto& [key, value] : checkpoint.metadata) {
    QKV_CHECK(!starts_with(key, "qkv."), fn, ": metadata key \"", key,
              "\" is reserved (keys starting with \"qkv.\" describe the checkpoint itself)");
    metadata[key] = value;
  }
  metadata.emplace(kFormatKey, std::string("checkpoint"));
  metadata.emplace(kVersionKey, std::string("1"));
  metadata.emplace(kStepKey, std::to_string(checkpoint.step));
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::filesystem::path& path) {
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(path);
  } catch (const Error& e) {
    // The reader's message names the file and the problem.
    throw Error(e.kind(), std::string("load_checkpoint: ") + e.what());
  }
  const SafetensorsMetadata& metadata = file->metadata();
  auto meta = [&](const char* key) -> const std::string* {
    const auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  };
  const std::string* format = meta(kFormatKey);
  QKV_CHECK(format && *format == "checkpoint", "load_checkpoint: '", path.string(),
            "' is a safetensors file but not a qkv checkpoint (no metadata \"", kFormatKey,
            "\": \"checkpoint\")");
  const std::string* version = meta(kVersionKey);
  QKV_CHECK(version && *version == "1", "load_checkpoint: '", path.string(),
            "' has checkpoint format version ", version ? *version : "(none)",
            "; this qkv reads version 1");
  Checkpoint checkpoint;
  const std::string* step = meta(kStepKey);
  bool step_ok = false;
  if (step) {
    const char* end = step->data() + step->size();
    const auto [ptr, ec] = std::from_chars(step->data(), end, checkpoint.step);
    step_ok = ec == std::errc() && ptr == end && checkpoint.step >= 0;
  }
  QKV_CHECK(step_ok, "load_checkpoint: '", path.string(), "' has an invalid \"", kStepKey,
            "\" entry \"", step ? *step : "(missing)", "\" (expected a whole number >= 0)");
  for (const auto& [key, value] : metadata) {
    if (!starts_with(key, "qkv.")) {
      checkpoint.metadata[key] = value;
      continue;
    }
    // Keys this version does not know would describe the checkpoint in a way
    // it cannot honour (a later format's): refused rather than dropped.
    QKV_CHECK(key == kFormatKey || key == kVersionKey || key == kStepKey, "load_checkpoint: '",
              path.string(), "' has the metadata key \"", key, "\" (= \"", value.substr(0, 60),
              "\"), which this qkv does not know; it reads \"", kFormatKey, "\", \"", kVersionKey,
              "\" and \"", kStepKey, "\" (keys starting with \"qkv.\" are reserved)");
  }
  for (const std::string& name : file->names()) {
    if (starts_with(name, kModelPrefix)) {
      checkpoint.model[name.substr(std::string(kModelPrefix).size())] = file->load(name);
    } else if (starts_with(name, kOptimizerPrefix)) {
      checkpoint.optimizer[name.substr(std::string(kOptimizerPrefix).size())] = file->load(name);
    } else {
      QKV_CHECK(false, "load_checkpoint: '", path.string(), "' holds the tensor \"", name,
                "\", which is neither \"model.*\" nor \"optimizer.*\"");
    }
  }
  return checkpoint;
}

std::string generator_state_text(const Generator& gen) {
  const GeneratorState state = gen.state();
  std::string text = "xoshiro256";
  char word[24];
  for (uint64_t w : state.words) {
    std::snprintf(word, sizeof word, " %016llx", static_cast<unsigned long long>(w));
    text += word;
  }
  if (state.has_spare_normal) {
    std::snprintf(word, sizeof word, " %016llx",
                  static_cast<unsigned long long>(std::bit_cast<uint64_t>(state.spare_normal)));
    text += word;
  } else {
    text += " -";
  }
  return text;
}

void restore_generator_state(Generator& gen, const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::vector<std::string> fields;
  for (std::string field; in >> field;) fields.push_back(field);
  const auto hex = [](const std::string& field, uint64_t& value) {
    const char* end = field.data() + field.size();
    const auto [ptr, ec] = std::from_chars(field.data(), end, value, 16);
    return field.size() == 16 && ec == std::errc() && ptr == end;
  };
  GeneratorState state;
  bool ok = fields.size() == 6 && fields[0] == "xoshiro256";
  for (size_t i = 0; ok && i < 4; ++i) ok = hex(fields[i + 1], state.words[i]);
  if (ok && fields[5] != "-") {
    uint64_t bits = 0;
    ok = hex(fields[5], bits);
    state.has_spare_normal = true;
    state.spare_normal = std::bit_cast<double>(bits);
  }
  ok = ok && (state.words[0] | state.words[1] | state.words[2] | state.words[3]) != 0;
  QKV_CHECK(ok, what, ": \"", text.substr(0, 120),
            "\" is not a random generator state (expected \"xoshiro256\", four 16-digit hex words "
            "not all zero, then \"-\" or a 16-digit hex word)");
  gen.set_state(state);
}

}  // namespace qkv::io
