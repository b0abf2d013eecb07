// The buffer cache behind Tensor::empty: large freed buffers are handed to the
// next tensor of their size, within the limit, and never shared while alive.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace qkv {
namespace {

constexpr int64_t kLarge = 1 << 20;  // 4 MiB of float32: cached
constexpr size_t kLargeBytes = size_t{4} << 20;

const void* buffer_of(const Tensor& t) { return t.raw_data(); }

TEST(BufferCache, AFreedLargeBufferServesTheNextTensorOfItsSize) {
  empty_buffer_cache();
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({kLarge}, DType::kFloat32);
    first = buffer_of(a);
    EXPECT_EQ(buffer_cache_bytes(), 0u);
  }
  EXPECT_EQ(buffer_cache_bytes(), kLargeBytes);
  // Same bytes in another shape and dtype: the same capacity.
  Tensor b = Tensor::empty({kLarge / 4, 2}, DType::kFloat64);
  EXPECT_EQ(buffer_of(b), first);
  EXPECT_EQ(buffer_cache_bytes(), 0u);
  // While b lives its buffer is not handed out again.
  Tensor c = Tensor::empty({kLarge}, DType::kFloat32);
  EXPECT_NE(buffer_of(c), first);
}

TEST(BufferCache, NearlyEqualSizesShareACapacity) {
  empty_buffer_cache();
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({kLarge - 1000}, DType::kFloat32);
    first = buffer_of(a);
  }
  Tensor b = Tensor::empty({kLarge - 10}, DType::kFloat32);
  EXPECT_EQ(buffer_of(b), first);
}

TEST(BufferCache, SmallBuffersAreNotKept) {
  empty_buffer_cache();
  { Tensor a = Tensor::empty({1000}, DType::kFloat32); }
  EXPECT_EQ(buffer_cache_bytes(), 0u);
}

TEST(BufferCache, TheLimitBoundsWhatIsKept) {
  empty_buffer_cache();
  const size_t old_limit = buffer_cache_limit();
  set_buffer_cache_limit(kLargeBytes + kLargeBytes / 2);
  {
    Tensor a = Tensor::empty({kLarge}, DType::kFloat32);
    Tensor b = Tensor::empty({kLarge}, DType::kFloat32);
  }
  EXPECT_EQ(buffer_cache_bytes(), kLargeBytes);  // the second did not fit
  set_buffer_cache_limit(kLargeBytes / 2);       // frees what is over
  EXPECT_EQ(buffer_cache_bytes(), 0u);
  set_buffer_cache_limit(0);  // off
  EXPECT_EQ(buffer_cache_limit(), 0u);
  { Tensor c = Tensor::empty({kLarge}, DType::kFloat32); }
  EXPECT_EQ(buffer_cache_bytes(), 0u);
  set_buffer_cache_limit(old_limit);
}

TEST(BufferCache, EmptyingFreesEverythingAndKeepsTheLimit) {
  const size_t limit = buffer_cache_limit();
  {
    Tensor a = Tensor::empty({kLarge}, DType::kFloat32);
    Tensor b = Tensor::empty({2 * kLarge}, DType::kFloat32);
  }
  EXPECT_EQ(buffer_cache_bytes(), 3 * kLargeBytes);
  empty_buffer_cache();
  EXPECT_EQ(buffer_cache_bytes(), 0u);
  EXPECT_EQ(buffer_cache_limit(), limit);
}

// Tensors made and dropped on every thread at once: each keeps its own values
// (no buffer is given to two live tensors), and the cache ends consistent.
TEST(BufferCache, ThreadsTakingAndGivingBackKeepTheirOwnBuffers) {
  empty_buffer_cache();
  std::atomic<int> failures = 0;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([thread, &failures] {
      const float mark = static_cast<float>(10 * thread);
      for (int round = 0; round < 50; ++round) {
        std::vector<Tensor> live;
        for (int i = 0; i < 3; ++i)
          live.push_back(Tensor::full({kLarge / 4 * (1 + round % 2)}, mark + i, DType::kFloat32));
        for (int i = 0; i < 3; ++i) {
          const float* data = live[i].data<float>();
          const int64_t n = live[i].numel();
          if (data[0] != mark + i || data[n / 2] != mark + i || data[n - 1] != mark + i) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(buffer_cache_bytes(), buffer_cache_limit());
  EXPECT_EQ(buffer_cache_bytes() % (size_t{1} << 16), 0u);
}

}  // namespace
}  // namespace qkv
