// The default thread count backs off while the cores are busy
// (kernels/thread_policy.h), a chosen one stays, and a thread's idle workers
// exit when it releases them.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "kernels/quant_gemm.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"
#include "quant_reference.h"

namespace {

// Two threads that spin until destroyed: neighbours wanting the cores.
struct BusyNeighbours {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  BusyNeighbours() {
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([this] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
  }
  ~BusyNeighbours() {
    stop = true;
    for (std::thread& t : threads) t.join();
  }
};

// Decoding-sized quant_gemm calls for `seconds` (3 load checks at least).
void run_kernels(double seconds) {
  std::mt19937 gen(1);
  const int64_t n = 256, k = 256;
  const std::vector<uint8_t> bytes =
      qkv_test::quant::random_weight(qkv::QuantFormat::kQ8_0, n, k, gen);
  const qkv::QuantizedWeight w(qkv::QuantFormat::kQ8_0, n, k, std::as_bytes(std::span(bytes)));
  std::vector<float> x(k, 0.5f), y(n);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end)
    qkv::kernels::quant_gemm(x.data(), k, 1, w.matrix(), nullptr, y.data(), n);
}

// (First: the thread count is still the default here.)
TEST(ThreadPolicy, DefaultThreadsBackOffBesideBusyNeighbours) {
  const int default_threads = qkv::num_threads();
  if (default_threads < 2 || getenv("OMP_NUM_THREADS") != nullptr)
    GTEST_SKIP() << "one thread, or OMP_NUM_THREADS chose the count";
  cpu_set_t ours;
  if (sched_getaffinity(0, sizeof(ours), &ours) != 0 ||
      CPU_COUNT(&ours) != sysconf(_SC_NPROCESSORS_ONLN))
    GTEST_SKIP() << "the other tasks' share of our cores is an estimate";
  {
    BusyNeighbours busy;
    run_kernels(0.35);
    EXPECT_LT(qkv::num_threads(), default_threads);
  }
}

TEST(ThreadPolicy, ChosenThreadsStay) {
  const int threads = std::max(2, qkv::num_threads());
  qkv::set_num_threads(threads);
  BusyNeighbours busy;
  run_kernels(0.35);
  EXPECT_EQ(qkv::num_threads(), threads);
}

// Threads of this process now.
int64_t thread_count() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return static_cast<int64_t>(std::distance(begin(tasks), end(tasks)));
}

// Threads of this process, once it holds `expected` (a worker's exit is not
// instant) or after a second.
int64_t live_threads(int64_t expected) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int64_t n = thread_count();
  while (n != expected && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = thread_count();
  }
  return n;
}

TEST(ThreadPolicy, ReleasedWorkersExitAndComeBackAtTheNextOp) {
  // LLVM's libomp (the clang sanitizer builds) exports kmp_* and only puts
  // paused workers to sleep; libgomp (GCC's, the release builds) frees them.
  if (dlsym(RTLD_DEFAULT, "kmp_set_blocktime") != nullptr)
    GTEST_SKIP() << "LLVM's libomp keeps a soft-paused thread's workers (asleep)";
  qkv::set_num_threads(2);
  const qkv::Shape large = {int64_t{1} << 23};  // zeroed by both threads
  qkv::Tensor t = qkv::Tensor::zeros(large);
  const int64_t with_worker = thread_count();
  qkv::release_idle_threads();
  EXPECT_EQ(live_threads(with_worker - 1), with_worker - 1);
  t.fill(1.0);
  t = qkv::Tensor::zeros(large);
  EXPECT_EQ(live_threads(with_worker), with_worker);
  EXPECT_EQ(t.data<float>()[(int64_t{1} << 23) - 1], 0.0f);
}

}  // namespace
