// nn::SkipWeightInit: a per-thread nesting count.
#include "qkv/nn/skip_weight_init.h"

namespace qkv::nn {

namespace {
thread_local int skip_depth = 0;
}

SkipWeightInit::SkipWeightInit() { ++skip_depth; }
SkipWeightInit::~SkipWeightInit() { --skip_depth; }
bool SkipWeightInit::active() { return skip_depth > 0; }

}  // namespace qkv::nn
