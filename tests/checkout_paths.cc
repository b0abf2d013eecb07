// The one test source compiled with absolute paths (CMake's QKV_SOURCE_DIR
// and QKV_CLI_PATH): see checkout_paths.h.
#include "checkout_paths.h"

namespace qkv_test {

const char* source_dir() { return QKV_SOURCE_DIR; }

const char* cli_path() {
#ifdef QKV_CLI_PATH
  return QKV_CLI_PATH;
#else
  return "";
#endif
}

}  // namespace qkv_test
