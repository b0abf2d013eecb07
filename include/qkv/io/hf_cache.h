// Models in the local Hugging Face cache, found by their id, offline (nothing
// is downloaded): what lets `qkv embed --model sentence-transformers/NAME` and
// qkv.SentenceEncoder("NAME") run a model that transformers or
// sentence-transformers fetched before.
//
//   std::optional<std::filesystem::path> dir =
//       io::find_cached_model("sentence-transformers/all-MiniLM-L6-v2");
//
// The layout is huggingface_hub's: the cache directory (hub_cache_dir) holds
// models--<org>--<name>/snapshots/<commit>/ with refs/<revision> naming the
// commit of a branch or tag.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qkv::io {

// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub (huggingface_hub's order).
std::filesystem::path hub_cache_dir();

// The ids `model` is looked up as: itself when it is "org/name", and also
// "sentence-transformers/<model>" for a bare name (as sentence-transformers
// does). Ids with empty parts, "." or ".." (they would leave the cache) give
// none.
std::vector<std::string> hub_ids_for(const std::string& model);

// The snapshot directory of the first of hub_ids_for(model) cached at
// `revision` (a branch or tag through refs/, or a 40-hex commit; "main"
// without refs/ takes the most recently written snapshot), or nullopt.
std::optional<std::filesystem::path> find_cached_model(const std::string& model,
                                                       const std::string& revision = "main");

}  // namespace qkv::io
