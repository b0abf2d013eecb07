#include "kernels/thread_scratch.h"

#include <algorithm>
#include <new>

namespace qkv::kernels {

float* thread_scratch(int64_t floats) {
  struct Buffer {
    float* data = nullptr;
    int64_t size = 0;
    ~Buffer() { ::operator delete[](data, std::align_val_t(64)); }
  };
  thread_local Buffer buffer;
  if (buffer.size < floats) {
    const int64_t size = std::max(floats, buffer.size + buffer.size / 2);
    ::operator delete[](buffer.data, std::align_val_t(64));
    buffer.data = nullptr;
    buffer.size = 0;
    buffer.data = static_cast<float*>(::operator new[](size * sizeof(float), std::align_val_t(64)));
    buffer.size = size;
  }
  return buffer.data;
}

void* thread_scratch_bytes(int64_t bytes) {
  return thread_scratch((bytes + int64_t{sizeof(float)} - 1) / int64_t{sizeof(float)});
}

}  // namespace qkv::kernels
