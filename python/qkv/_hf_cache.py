"""Finding a model given as a local path or as a Hugging Face id in the local
Hugging Face cache, offline (nothing is downloaded).

The cache is huggingface_hub's layout: $HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub, holding models--<org>--<name>/snapshots/<commit>/
with refs/<revision> naming the commit of a branch or tag.

Not public: qkv.SentenceEncoder uses it.
"""

import os
import pathlib

from . import _core

__all__ = ["hub_cache_dir", "resolve_model_dir"]

FETCH_HINT = ("fetch it with scripts/fetch_model.sh (all-MiniLM-L6-v2 into "
              "models/all-MiniLM-L6-v2), or download it into the Hugging Face cache "
              "(huggingface-cli download <id>) and pass its id")


def hub_cache_dir():
    """The directory huggingface_hub caches models in."""
    return pathlib.Path(_core.hub_cache_dir())


def resolve_model_dir(model, revision=None, function="SentenceEncoder"):
    """A local directory for `model`: the path itself when it is a directory,
    else the cached snapshot of the Hugging Face id `model` (a bare name like
    "all-MiniLM-L6-v2" is also looked up as "sentence-transformers/<name>", as
    sentence-transformers does), found by the same C++ lookup as the CLI's
    (qkv/io/hf_cache.h). FileNotFoundError otherwise, saying where it looked
    and how to fetch the model."""
    path = pathlib.Path(os.fspath(model)).expanduser()
    if path.is_dir():
        return path
    name = os.fspath(model)
    revision = revision or "main"
    snapshot = _core.find_cached_model(name, revision)
    if snapshot is not None:
        return pathlib.Path(snapshot)
    if path.exists():
        raise NotADirectoryError(f"{function}(): model {name!r} is a file, not a directory "
                                 f"(expected config.json, model.safetensors, tokenizer.json "
                                 f"in a model directory)")
    looked = ", ".join(f"models--{c.replace('/', '--')}" for c in _core.hub_ids_for(name)) \
        or "no folder: not an org/name id"
    raise FileNotFoundError(
        f"{function}(): model {name!r} is not a directory, nor in the Hugging Face cache "
        f"{hub_cache_dir()} (looked for {looked}, revision {revision!r}; qkv does not "
        f"download): {FETCH_HINT}")
