// Where tensor buffers come from: large ones are recycled (see runtime.h).
#pragma once

#include <cstddef>

namespace qkv::detail {

// The size actually allocated for a request of `bytes` (64-byte aligned
// storage): large requests are rounded up so that buffers of nearly the same
// size can stand in for each other.
size_t buffer_capacity(size_t bytes);

// A 64-byte aligned buffer of `capacity` bytes (a value buffer_capacity
// returned), taken from the cache when one of that size is there.
std::byte* acquire_buffer(size_t capacity);

// Gives back a buffer from acquire_buffer: kept for reuse while the cache
// has room, else freed.
void release_buffer(std::byte* buffer, size_t capacity);

}  // namespace qkv::detail
