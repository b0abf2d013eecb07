// Tests that run once on every kernel table (ISA) this CPU supports: the
// fixtures, the instantiation and its names.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/fused_attention.h"
#include "qkv/runtime.h"

namespace qkv_test {

using qkv::kernels::KernelTable;

// Parametrised by a kernel table, which the test reaches through GetParam().
using KernelTableTest = ::testing::TestWithParam<const KernelTable*>;

// ... and which is the active table while the test runs (override_kernel_table).
class ActiveKernelTableTest : public KernelTableTest {
 protected:
  void SetUp() override { qkv::kernels::override_kernel_table(GetParam()); }
  void TearDown() override { qkv::kernels::override_kernel_table(nullptr); }
};

// Parametrised by a table of any kernel family (quant_gemm, low-precision
// gemm, ...) that `override_table` makes the family's active one while the
// test runs; the thread count, which tests may change, is restored after.
template <class Table, void (*override_table)(const Table*)>
class ActiveFamilyTableTest : public ::testing::TestWithParam<const Table*> {
 protected:
  void SetUp() override { override_table(this->GetParam()); }
  void TearDown() override {
    override_table(nullptr);
    qkv::set_num_threads(threads_);
  }
  const int threads_ = qkv::num_threads();
};

// out[i] = f(x[i]) by one of the table's vector functions (exp_into,
// log_into); out starts as -1 everywhere, so an element left out shows.
inline std::vector<float> apply_vector_function(void (*f)(const float*, int64_t, float*),
                                                const std::vector<float>& x) {
  std::vector<float> out(x.size(), -1.0f);
  f(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

inline std::string kernel_table_name(const ::testing::TestParamInfo<const KernelTable*>& info) {
  return info.param->name;
}

}  // namespace qkv_test

// Instantiates the TEST_Ps of `suite` as EveryIsa/<suite>.<test>/<table name>.
#define QKV_INSTANTIATE_FOR_EVERY_KERNEL_TABLE(suite)                                    \
  INSTANTIATE_TEST_SUITE_P(EveryIsa, suite,                                              \
                           ::testing::ValuesIn(qkv::kernels::supported_kernel_tables()), \
                           qkv_test::kernel_table_name)
