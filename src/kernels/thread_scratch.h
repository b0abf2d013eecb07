// Work memory of the calling thread, kept from call to call (OpenMP threads
// live as long as the process), so that a warm kernel call allocates nothing.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// At least `floats` floats, 64-byte aligned, owned by this thread: valid until
// this thread's next call (kernels that use it do not nest). It grows by half
// again at the least, so that a thread whose problems grow by a key at a time
// (a worker decoding sequences) allocates a few times, not at every step.
float* thread_scratch(int64_t floats);
// The same memory, at least `bytes` bytes of it.
void* thread_scratch_bytes(int64_t bytes);

}  // namespace qkv::kernels
