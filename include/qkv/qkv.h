// qkv: attention, from Query/Key/Value to the Transformer.
// One include for the whole public API; each header documents one concept.
#pragma once

#include "qkv/attention.h"                  // simple_attention, ScoreFunction, SDPA
#include "qkv/error.h"                      // qkv::Error
#include "qkv/generator.h"                  // seeded randomness
#include "qkv/io/safetensors.h"             // reading and writing weights
#include "qkv/linear.h"                     // linear, matmul
#include "qkv/masks.h"                      // padding and causal masks
#include "qkv/nn/multihead_attention.h"     // nn::MultiheadAttention
#include "qkv/runtime.h"                    // threads, instruction sets, peak
#include "qkv/tensor.h"                     // qkv::Tensor
#include "qkv/viz/heatmap.h"                // attention heatmaps as PNG
