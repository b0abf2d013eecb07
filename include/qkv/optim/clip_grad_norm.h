// Gradient clipping by the global norm: torch.nn.utils.clip_grad_norm_.
//
//   double norm = optim::clip_grad_norm(params, 1.0);   // before opt.step()
#pragma once

#include <span>
#include <vector>

#include "qkv/nn/parameter.h"
#include "qkv/tensor.h"

namespace qkv::optim {

// The p-norm of all gradients taken together (as one long vector): total =
// (Σ |g|^p)^(1/p), or max |g| for norm_type = inf. Every gradient is then
// multiplied by min(max_norm / (total + 1e-6), 1), as torch does (the 1e-6
// keeps the factor finite, so a norm just at max_norm is scaled by slightly
// less than 1). Returns the total norm before clipping, computed in float64.
// error_if_nonfinite: throw if the total is NaN or ±inf (otherwise the
// gradients are scaled by a NaN or 0 factor, as torch).
// grads: tensors of any shape, float32 or float64, updated in place.
double clip_grad_norm(std::span<const Tensor> grads, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// The same over the parameters' gradient buffers.
double clip_grad_norm(std::span<const nn::Parameter> params, double max_norm,
                      double norm_type = 2.0, bool error_if_nonfinite = false);

}  // namespace qkv::optim
