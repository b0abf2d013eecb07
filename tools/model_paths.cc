// find_model. QKV_SOURCE_DIR (the checkout of a build tree) is defined for this
// file alone, so that the other objects of the CLI hold no path of the clone
// and come from the compiler cache in any clone.
#include "model_paths.h"

#include <cstdlib>
#include <filesystem>

namespace qkv::cli {

std::string find_model(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string prefix = "models/";
  if (fs::exists(path) || path.rfind(prefix, 0) != 0) return path;
  const std::string rest = path.substr(prefix.size());
  if (const char* dir = std::getenv("QKV_MODELS"); dir != nullptr && *dir != '\0')
    if (fs::exists(fs::path(dir) / rest)) return (fs::path(dir) / rest).string();
#if defined(QKV_SOURCE_DIR)
  if (const fs::path built = fs::path(QKV_SOURCE_DIR) / "models" / rest; fs::exists(built))
    return built.string();
#endif
  return path;
}

}  // namespace qkv::cli
