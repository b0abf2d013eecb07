// Where the models of scripts/fetch_model.sh are, seen from any directory:
// the commands' default model paths ("models/NAME") work from the checkout's
// root, from anywhere else when QKV_MODELS names the folder, and from anywhere
// for the qkv binary of a build tree (its checkout's models/).
#pragma once

#include <string>

namespace qkv::cli {

// `path` itself when it exists or does not start with models/; otherwise the
// first of $QKV_MODELS/REST and <checkout>/models/REST that exists (REST: the
// path after "models/"), or `path` when none does, for the caller's message.
std::string find_model(const std::string& path);

}  // namespace qkv::cli
