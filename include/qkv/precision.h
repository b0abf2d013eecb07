// The arithmetic a model computes in, chosen once when it is loaded:
//
//   kFloat32   float32 everywhere: the exact mode, parity with torch.
//   kBFloat16  linear layers and attention multiply bfloat16 values
//              (weights rounded once at load, activations as they come) and
//              accumulate in float32; softmax, norms and activations stay float32.
//   kInt8      linear layers multiply int8: weights with one symmetric scale per
//              output channel (at load, smoothed against calibrated activation
//              ranges when the model recorded them: nn::Module::record_input_ranges),
//              activations with a dynamic scale and zero point per row (per
//              call); int32 sums, rescaled to float32. A feed-forward's second
//              linear layer runs bfloat16 (nn::FeedForward says why). Attention
//              as kBFloat16.
//
// Tensors between layers stay float32 in every precision.
#pragma once

#include <cstdint>
#include <string_view>

namespace qkv {

enum class Precision : uint8_t { kFloat32, kBFloat16, kInt8 };

// "float32", "bfloat16", "int8".
const char* precision_name(Precision precision);

// The precision named `name`: "float32" (or "fp32"), "bfloat16" (or "bf16"),
// "int8". Anything else throws a value error naming `name` and the choices.
Precision parse_precision(std::string_view name);

}  // namespace qkv
