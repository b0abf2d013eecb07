// nn::DecoderModel files: the parameters as safetensors tensors (the model's
// state_dict names), the config as JSON in the file's metadata.
//
//   models::save_decoder_model(model, "tiny.safetensors", {{"note", "mine"}});
//   nn::DecoderModel back = models::load_decoder_model("tiny.safetensors");
#pragma once

#include <filesystem>
#include <string>

#include "qkv/io/safetensors.h"
#include "qkv/nn/decoder_model.h"

namespace qkv::models {

// The config as JSON ("positions": "rope" | "learned" | "sinusoidal", "norm":
// "rmsnorm" | "layernorm", "ffn": "swiglu" | "gelu", "rope_style":
// "half_split" | "interleaved", "dtype": "float32" | "float64") and back.
// Missing fields take their defaults; unknown fields are an error.
std::string decoder_config_to_json(const nn::DecoderModelConfig& config);
nn::DecoderModelConfig decoder_config_from_json(const std::string& json);

// The metadata key under which save_decoder_model stores decoder_config_to_json.
inline constexpr const char* kDecoderConfigKey = "qkv.decoder_model.config";

// Writes the parameters and the config (metadata kDecoderConfigKey, plus
// `metadata`, e.g. a vocabulary) to a safetensors file, atomically.
void save_decoder_model(const nn::DecoderModel& model, const std::filesystem::path& path,
                        const io::SafetensorsMetadata& metadata = {});
// Reads a file written by save_decoder_model, checking its config against its
// tensors before anything is allocated; `metadata` (optional) receives its metadata.
nn::DecoderModel load_decoder_model(const std::filesystem::path& path,
                                    io::SafetensorsMetadata* metadata = nullptr);

}  // namespace qkv::models
