// qkv: attention, from Query/Key/Value to the Transformer.
// One include for the whole public API; each header documents one concept.
#pragma once

#include "qkv/attention.h"                  // simple_attention, ScoreFunction, SDPA
#include "qkv/error.h"                      // qkv::Error
#include "qkv/functional.h"                 // layer_norm, gelu, dropout, … (§8.1)
#include "qkv/generator.h"                  // seeded randomness
#include "qkv/io/safetensors.h"             // reading and writing weights
#include "qkv/linear.h"                     // linear, matmul
#include "qkv/masks.h"                      // padding and causal masks
#include "qkv/nn/decoder_model.h"           // decoder-only model (§8.2)
#include "qkv/models/decoder_model_file.h"  // its safetensors files
#include "qkv/nn/decoder_session.h"         // generation with a KV cache
#include "qkv/nn/embedding.h"               // nn::Embedding
#include "qkv/nn/feed_forward.h"            // nn::FeedForward, SwiGLU (§8.1)
#include "qkv/nn/grouped_query_attention.h" // GQA attention with RoPE (decoder-only models)
#include "qkv/nn/kv_cache.h"                // preallocated keys and values for decoding
#include "qkv/nn/layer_norm.h"              // nn::LayerNorm
#include "qkv/nn/linear.h"                  // nn::Linear
#include "qkv/nn/module.h"                  // nn::Module: parameters, state_dict, train/eval
#include "qkv/nn/multihead_attention.h"     // nn::MultiheadAttention
#include "qkv/nn/positional_encoding.h"     // sinusoidal, learned, RoPE, ALiBi, T5 (§3.4)
#include "qkv/nn/rms_norm.h"                // nn::RMSNorm
#include "qkv/precision.h"                  // float32, bfloat16 or int8 arithmetic
#include "qkv/nn/transformer.h"             // encoder/decoder layers, nn::Transformer (§8.1)
#include "qkv/nn/transformer_decoding.h"    // incremental decoding of nn::Transformer
#include "qkv/runtime.h"                    // threads, instruction sets, peak
#include "qkv/sampling.h"                   // greedy, temperature, top-k, top-p
#include "qkv/tensor.h"                     // qkv::Tensor
#include "qkv/viz/heatmap.h"                // attention heatmaps as PNG
