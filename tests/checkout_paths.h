// Where the tests find the checkout (models/, tests/data/) and the built `qkv`
// CLI. The absolute paths live in checkout_paths.cc alone, so every test file
// compiles to the same object in any clone and comes from the compiler cache.
#pragma once

namespace qkv_test {

// The source tree's root.
const char* source_dir();

// The built `qkv` binary, or "" when the CLI is not built (QKV_BUILD_TOOLS=OFF).
const char* cli_path();

}  // namespace qkv_test
