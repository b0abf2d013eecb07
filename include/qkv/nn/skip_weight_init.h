// nn::SkipWeightInit — build a module without its large weights, for loaders
// that fill them from a file (as torch's `torch.device("meta")` / accelerate's
// init_empty_weights).
//
//   {
//     nn::SkipWeightInit skip;                 // on this thread, until it goes
//     nn::DecoderModel model(config);          // no random weights drawn or allocated
//   }
//   model.blocks()[0]...q_proj.set_quantized_weight(w);   // or set_weight(tensor)
//
// While one lives on the current thread, nn::Linear leaves its weight
// undefined (its bias, if any, is zeros), nn::Embedding its table, and
// nn::DecoderModel its untied output head; everything else (norms, RoPE
// tables) is built as usual. A module whose weight is still missing throws a
// qkv::Error naming it on forward. State dicts skip undefined weights, so
// load_state_dict cannot fill them: use the modules' set_weight /
// set_quantized_weight. Guards nest.
#pragma once

namespace qkv::nn {

class SkipWeightInit {
 public:
  SkipWeightInit();
  ~SkipWeightInit();
  SkipWeightInit(const SkipWeightInit&) = delete;
  SkipWeightInit& operator=(const SkipWeightInit&) = delete;

  // Whether a guard lives on the current thread.
  static bool active();
};

}  // namespace qkv::nn
