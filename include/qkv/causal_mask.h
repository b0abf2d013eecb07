// qkv::CausalMask on its own: the attention kernels (src/kernels) take it, and
// they may not include the ops API (qkv/attention.h, which includes this).
#pragma once

namespace qkv {

// Which causal mask to apply. torch's `is_causal=True` is kTopLeft:
// query i sees keys j <= i. Decoding L new queries against S cached keys
// needs kBottomRight: query i sees keys j <= i + S - L.
enum class CausalMask { kNone, kTopLeft, kBottomRight };

}  // namespace qkv
