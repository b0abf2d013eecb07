// OpenBLAS reads OPENBLAS_CORETYPE only when it is loaded, before main() runs;
// when it fell back to its generic kernels, the one way to fix it from inside
// is to start the process again with the variable set (qkv/runtime.h).
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "command.h"
#include "qkv/runtime.h"

namespace qkv::cli {

void use_fast_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !blas_kernels_misdetected()) return;
  const std::string coretype = openblas_coretype_for_cpu();
  setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Only reached if execv failed: carry on with the slower kernels.
}

}  // namespace qkv::cli
