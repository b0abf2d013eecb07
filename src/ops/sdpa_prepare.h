// Shared by the forward and backward SDPA ops: every argument check of torch
// 2.13's scaled_dot_product_attention, then the kernel problem with the
// broadcast of leading dims resolved into per-(batch, head) offsets.
#pragma once

#include "kernels/reference/sdpa_reference.h"
#include "qkv/attention.h"

namespace qkv {

struct PreparedSdpa {
  kernels::SdpaProblem problem;  // output, weights, lse and dropout seed not yet set
  Shape out_lead;                // leading dims of the output: [..., H]
  Shape out_shape;               // [..., H, L, Ev]
  Shape weights_shape;           // [..., H, L, S]
  int64_t head_group = 1;        // query heads per key/value head (GQA)
  Tensor mask, keep;             // keep the expanded views alive
};

// fn: the name used in error messages.
PreparedSdpa prepare_sdpa(const Tensor& q, const Tensor& k, const Tensor& v,
                          const SdpaOptions& options, const char* fn);
// The same into an existing PreparedSdpa, reusing its memory: allocation-free
// once it has seen a problem of this size.
void prepare_sdpa(PreparedSdpa& prepared, const Tensor& q, const Tensor& k, const Tensor& v,
                  const SdpaOptions& options, const char* fn);

// What SdpaWorkspace holds.
struct SdpaWorkspace::State {
  PreparedSdpa prepared;
  kernels::SdpaProblem stacked;  // GQA query heads stacked (decoding)
  std::vector<double> lse;
};

// Element offsets of every trailing [rows, cols] matrix of `t` for each index
// of the output's leading dims `out_lead` (t's leading dims broadcast to it).
// With head_group > 1 (GQA), output head h reads t's head h / head_group.
std::vector<int64_t> matrix_offsets(const Tensor& t, const Shape& out_lead, int64_t head_group);
// The same into `offsets`, reusing its memory.
void fill_offsets(std::vector<int64_t>& offsets, const Tensor& t, const Shape& out_lead,
                  int64_t head_group);

kernels::MatrixOperand matrix_operand(const Tensor& t, const Shape& out_lead,
                                      int64_t head_group = 1);
// The same into `m`, reusing its offsets' memory.
void fill_matrix_operand(kernels::MatrixOperand& m, const Tensor& t, const Shape& out_lead,
                         int64_t head_group = 1);

// An uninitialised tensor of `shape` and `dtype` for a result laid out as
// `layout` says relative to the input `like` (SdpaLayout). kLikeInputs: the
// strides torch.empty_like(like) would have when `shape` is like's shape,
// else like's dims in that memory order, packed; contiguous where like's
// leading dims differ from shape's or the last dim would not be innermost.
Tensor empty_laid_out(const Shape& shape, DType dtype, const Tensor& like, SdpaLayout layout);
// The same filled with zeros.
Tensor zeros_laid_out(const Shape& shape, DType dtype, const Tensor& like, SdpaLayout layout);

// Whether the call runs the fused kernel (else the reference).
bool use_fused_kernel(const Tensor& q, const SdpaOptions& options, const char* fn);

}  // namespace qkv
