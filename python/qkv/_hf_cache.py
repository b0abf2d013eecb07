"""Finding a model given as a local path or as a Hugging Face id in the local
Hugging Face cache, offline (nothing is downloaded).

The cache is huggingface_hub's layout: $HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub, holding models--<org>--<name>/snapshots/<commit>/
with refs/<revision> naming the commit of a branch or tag.

Not public: qkv.SentenceEncoder uses it.
"""

import os
import pathlib
import re

__all__ = ["hub_cache_dir", "resolve_model_dir"]

FETCH_HINT = ("fetch it with scripts/fetch_model.sh (all-MiniLM-L6-v2 into "
              "models/all-MiniLM-L6-v2), or download it into the Hugging Face cache "
              "(huggingface-cli download <id>) and pass its id")


def hub_cache_dir():
    """The directory huggingface_hub caches models in."""
    if os.environ.get("HF_HUB_CACHE"):
        return pathlib.Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return pathlib.Path(home).expanduser() / "hub"


def _snapshot(repo_dir, revision):
    """The snapshot directory of `revision` (a branch, tag or commit) in repo_dir, or None."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        if (snapshots / commit).is_dir():
            return snapshots / commit
    if re.fullmatch(r"[0-9a-f]{40}", revision) and (snapshots / revision).is_dir():
        return snapshots / revision
    if revision == "main":  # no refs: the most recent snapshot
        found = sorted((d for d in snapshots.iterdir() if d.is_dir()),
                       key=lambda d: d.stat().st_mtime)
        return found[-1] if found else None
    return None


def resolve_model_dir(model, revision=None, function="SentenceEncoder"):
    """A local directory for `model`: the path itself when it is a directory,
    else the cached snapshot of the Hugging Face id `model` (a bare name like
    "all-MiniLM-L6-v2" is also looked up as "sentence-transformers/<name>", as
    sentence-transformers does). FileNotFoundError otherwise, saying where it
    looked and how to fetch the model."""
    path = pathlib.Path(os.fspath(model)).expanduser()
    if path.is_dir():
        return path
    name = os.fspath(model)
    revision = revision or "main"
    cache = hub_cache_dir()
    candidates = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo_id in candidates:
        parts = repo_id.split("/")
        if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
            continue
        snapshot = _snapshot(cache / ("models--" + "--".join(parts)), revision)
        if snapshot is not None:
            return snapshot
    if path.exists():
        raise NotADirectoryError(f"{function}(): model {name!r} is a file, not a directory "
                                 f"(expected config.json, model.safetensors, tokenizer.json "
                                 f"in a model directory)")
    looked = ", ".join(f"models--{c.replace('/', '--')}" for c in candidates)
    raise FileNotFoundError(
        f"{function}(): model {name!r} is not a directory, nor in the Hugging Face cache "
        f"{cache} (looked for {looked}, revision {revision!r}; qkv does not download): "
        f"{FETCH_HINT}")
