#include "tensor/buffer_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <iterator>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "qkv/runtime.h"

namespace qkv {

namespace {

// Buffers from 1 MiB up are cached; the allocator serves smaller ones from
// its heap anyway. Sizes round up to 64 KiB (at most 6 % more memory).
constexpr size_t kMinCachedBytes = size_t{1} << 20;
constexpr size_t kGranule = size_t{1} << 16;
constexpr size_t kDefaultLimit = size_t{1} << 30;

// Freed buffers by capacity. Never destroyed: tensors that outlive main()
// (statics) still give their buffers back here.
struct BufferCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<std::byte*>> free_by_capacity;
  size_t held = 0;
  size_t limit = kDefaultLimit;
};

BufferCache& cache() {
  static BufferCache* instance = new BufferCache;
  return *instance;
}

// Buffers from this size up start on a 2 MiB boundary and ask Linux for
// transparent huge pages: the kernels read activations a short row at a time
// across many 4 KiB pages (the heads of a [B, L, H, E] view), and each of
// those pages would cost a TLB miss.
constexpr size_t kHugePageBytes = size_t{1} << 21;

size_t alignment_of(size_t capacity) { return capacity >= kHugePageBytes ? kHugePageBytes : 64; }

std::byte* allocate(size_t capacity) {
  const size_t alignment = alignment_of(capacity);
  auto* buffer = static_cast<std::byte*>(::operator new[](capacity, std::align_val_t(alignment)));
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePageBytes) madvise(buffer, capacity, MADV_HUGEPAGE);
#endif
  return buffer;
}

void deallocate(std::byte* buffer, size_t capacity) {
  ::operator delete[](buffer, std::align_val_t(alignment_of(capacity)));
}

// Frees cached buffers until at most `keep` bytes stay. Caller holds the lock.
void shrink_to(BufferCache& c, size_t keep) {
  for (auto it = c.free_by_capacity.begin(); it != c.free_by_capacity.end() && c.held > keep;) {
    std::vector<std::byte*>& buffers = it->second;
    while (!buffers.empty() && c.held > keep) {
      deallocate(buffers.back(), it->first);
      buffers.pop_back();
      c.held -= it->first;
    }
    it = buffers.empty() ? c.free_by_capacity.erase(it) : std::next(it);
  }
}

}  // namespace

namespace detail {

size_t buffer_capacity(size_t bytes) {
  const size_t aligned = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (aligned < kMinCachedBytes) return aligned;
  return (aligned + kGranule - 1) / kGranule * kGranule;
}

std::byte* acquire_buffer(size_t capacity) {
  if (capacity >= kMinCachedBytes) {
    BufferCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_by_capacity.find(capacity);
    if (it != c.free_by_capacity.end() && !it->second.empty()) {
      std::byte* buffer = it->second.back();
      it->second.pop_back();
      c.held -= capacity;
      return buffer;
    }
  }
  return allocate(capacity);
}

void release_buffer(std::byte* buffer, size_t capacity) {
  if (capacity >= kMinCachedBytes) {
    BufferCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.held + capacity <= c.limit) {
      c.free_by_capacity[capacity].push_back(buffer);
      c.held += capacity;
      return;
    }
  }
  deallocate(buffer, capacity);
}

}  // namespace detail

void set_buffer_cache_limit(size_t bytes) {
  BufferCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.limit = bytes;
  shrink_to(c, bytes);
}

size_t buffer_cache_limit() {
  BufferCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.limit;
}

size_t buffer_cache_bytes() {
  BufferCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.held;
}

void empty_buffer_cache() {
  BufferCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  shrink_to(c, 0);
}

}  // namespace qkv
