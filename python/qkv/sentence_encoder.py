"""Sentence embeddings, as sentence-transformers computes them for a
Transformer -> Pooling (-> Normalize) model such as all-MiniLM-L6-v2, with
sentence-transformers' encode() arguments.

    import qkv
    encoder = qkv.SentenceEncoder("models/all-MiniLM-L6-v2")   # or a cached HF id
    e = encoder.encode(["A cat sits on the mat.", "A dog runs."])   # [2, 384] float32
    encoder.similarity(e, e)                                        # [2, 2] cosines
    tokens = encoder.encode(texts, output_value="token_embeddings") # [[n_i, 384], ...]
    encoder.max_seq_length = 128                                    # truncate earlier

    fast = qkv.SentenceEncoder("models/all-MiniLM-L6-v2", precision="int8")
"""

import json
import os
import sys

import numpy as np

from . import _core
from ._hf_cache import resolve_model_dir

__all__ = ["SentenceEncoder"]

_SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


def _progress_bar(total, enabled):
    """(callback(done), close()) for a bar on stderr: tqdm's when installed,
    else a plain one; (None, no-op) when not enabled."""
    if not enabled:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=total, desc="Batches", unit="text", file=sys.stderr)

        def update(done):
            bar.update(done - bar.n)

        return update, bar.close

    def draw(done):
        filled = 30 * done // max(total, 1)
        sys.stderr.write(f"\rBatches [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
        sys.stderr.flush()

    def close():
        sys.stderr.write("\n")
        sys.stderr.flush()

    draw(0)
    return draw, close


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("SentenceEncoder: convert_to_tensor=True (or convert_to_numpy=False) "
                          "returns torch tensors: install torch") from None
    return torch


def _as_matrix(x, name):
    """(2-D float array, whether x was a torch tensor)."""
    torch = sys.modules.get("torch")
    was_torch = torch is not None and isinstance(x, torch.Tensor)
    if was_torch:
        x = x.detach().cpu().numpy()
    elif isinstance(x, (list, tuple)) and x and torch is not None and isinstance(x[0], torch.Tensor):
        x, was_torch = torch.stack(list(x)).detach().cpu().numpy(), True
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"SentenceEncoder.similarity(): {name} must hold numbers, "
                        f"got dtype {a.dtype}")
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"SentenceEncoder.similarity(): {name} must be [N, D] or [D], "
                         f"got {a.ndim} dims")
    return a, was_torch


class SentenceEncoder:
    """Reads a sentence-transformers model directory: config.json,
    model.safetensors, tokenizer.json, modules.json, the pooling config
    (1_Pooling/config.json) and sentence_bert_config.json or tokenizer_config.json
    (max_seq_length), as written by sentence-transformers before or from version 6;
    config_sentence_transformers.json for prompts and the similarity function.

    model_name_or_path: a model directory, or a Hugging Face id ("org/name";
    a bare name also as "sentence-transformers/<name>") found in the local
    Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub),
    at `revision` (a branch, tag or commit; default "main"). Nothing is
    downloaded: a missing model raises FileNotFoundError saying how to fetch it.

    Tokenizes with qkv's WordPiece tokenizer, runs qkv's BertModel, pools
    (mean over real tokens for all-MiniLM-L6-v2; CLS, max and mean·√len are
    read too) and L2-normalises when modules.json lists Normalize.

    precision: the arithmetic of the transformer's layers. "float32" (the
    default) matches sentence-transformers; "bfloat16" ("bf16") multiplies
    bfloat16 values with float32 sums; "int8" multiplies int8 weights (one
    scale per output channel) by int8 activations (one scale per token).
    Weights are converted once, here; embeddings are float32 in every case.

    prompts, default_prompt_name, similarity_fn_name, truncate_dim: as
    sentence-transformers 6.2's constructor (given values win over the
    config's; prompts also holds "query" and "document", "" unless set).
    """

    def __init__(self, model_name_or_path, precision="float32", *, revision=None, device=None,
                 prompts=None, default_prompt_name=None, similarity_fn_name=None,
                 truncate_dim=None):
        _check_device(device)
        model_dir = resolve_model_dir(model_name_or_path, revision)
        self._encoder = _core.SentenceEncoder(os.fspath(model_dir), str(precision))
        self.model_dir = model_dir
        config = {}
        config_file = model_dir / "config_sentence_transformers.json"
        if config_file.is_file():
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
            if not isinstance(config, dict):
                raise ValueError(f"SentenceEncoder: {config_file} must be a JSON object")
        # sentence-transformers 6.2's merge: "query" and "document" always
        # exist (empty unless set), given prompts win, saved ones fill the rest.
        merged = {"query": None, "document": None, **dict(prompts or {})}
        for name, text in dict(config.get("prompts") or {}).items():
            if merged.get(name) is None:
                merged[name] = text
        self.prompts = {name: "" if text is None else text for name, text in merged.items()}
        self.default_prompt_name = (config.get("default_prompt_name")
                                    if default_prompt_name is None else default_prompt_name)
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(f"SentenceEncoder: default_prompt_name "
                             f"{self.default_prompt_name!r} is not among the prompts "
                             f"{list(self.prompts)}")
        self.similarity_fn_name = similarity_fn_name or config.get("similarity_fn_name") \
            or "cosine"
        self.truncate_dim = _check_truncate_dim(truncate_dim, "SentenceEncoder")
        self._include_prompt = _pooling_includes_prompt(model_dir)

    @property
    def similarity_fn_name(self):
        """"cosine" (the default), "dot", "euclidean" or "manhattan", as in
        sentence-transformers; similarity() computes it."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, name):
        name = getattr(name, "value", name)  # sentence-transformers' SimilarityFunction enum
        if name not in _SIMILARITIES:
            raise ValueError(f"SentenceEncoder: similarity_fn_name must be one of "
                             f"{list(_SIMILARITIES)}, got {name!r}")
        self._similarity_fn_name = name

    def encode(self, inputs=None, prompt_name=None, prompt=None, batch_size=32,
               show_progress_bar=None, output_value="sentence_embedding", precision="float32",
               convert_to_numpy=True, convert_to_tensor=False, device=None,
               normalize_embeddings=False, truncate_dim=None, *, sentences=None):
        """sentence-transformers' encode: a str gives one result, a list one per text.
        The texts are `inputs` (sentence-transformers 6's name) or, as before
        version 6, `sentences`.

        Returns, as sentence-transformers 6.2 does:
          - [N, D] float32 numpy (the default; [D] for a str),
          - convert_to_tensor=True: one [N, D] torch tensor,
          - convert_to_numpy=False: a list of N [D] torch tensors,
          - output_value="token_embeddings": a list of [tokens_i, D] arrays, one
            per text: the last hidden state of its real tokens ([CLS] … [SEP]),
            not pooled or normalised (numpy arrays; torch tensors, as
            sentence-transformers always gives, when convert_to_tensor=True or
            convert_to_numpy=False).

        prompt (or prompt_name, a key of `prompts`; else default_prompt_name):
        a string put before every text, as sentence-transformers does (its
        tokens are pooled with the text's; a ValueError when the Pooling config
        sets include_prompt false, or when both prompt and prompt_name are
        given). batch_size: texts per forward pass
        (texts are sorted by token count, so that little padding is computed;
        results come back in the order given). show_progress_bar: a bar on
        stderr (tqdm's when installed); None means off. normalize_embeddings:
        L2-normalise each embedding. truncate_dim: keep the first dimensions
        (Matryoshka models; a positive int), before normalize_embeddings;
        neither applies to token embeddings (a ValueError when given with
        them). Longer texts are
        truncated to max_seq_length tokens. precision: "float32" only (the
        model's own arithmetic is set by the constructor's precision); device:
        None or "cpu".

        Ctrl-C is heard between batches (KeyboardInterrupt); the GIL is released
        while the model runs, so other Python threads go on.
        """
        _check_device(device)
        if precision not in (None, "float32"):
            raise ValueError(f"SentenceEncoder.encode(): precision={precision!r} (quantized "
                             f"embeddings) is not implemented; use \"float32\"")
        if output_value not in ("sentence_embedding", "token_embeddings"):
            raise ValueError(f"SentenceEncoder.encode(): output_value must be "
                             f"\"sentence_embedding\" or \"token_embeddings\", got "
                             f"{output_value!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size <= 0:
            raise ValueError(f"SentenceEncoder.encode(): batch_size must be a positive "
                             f"integer, got {batch_size!r}")
        if (inputs is None) == (sentences is None):
            raise TypeError("SentenceEncoder.encode(): give the texts once, as inputs (or "
                            "sentences, its name before sentence-transformers 6)")
        sentences = inputs if sentences is None else sentences
        if convert_to_tensor:
            convert_to_numpy = False
        single = isinstance(sentences, str)
        texts = _texts(sentences, "SentenceEncoder.encode()")
        if output_value == "token_embeddings" and (normalize_embeddings or truncate_dim is not None):
            # sentence-transformers would return the token vectors as they are.
            raise ValueError("SentenceEncoder.encode(): normalize_embeddings and truncate_dim "
                             "apply to sentence embeddings; output_value=\"token_embeddings\" "
                             "gives the raw token vectors, so leave them unset")
        prompt = self._resolve_prompt(prompt, prompt_name)
        if prompt:
            if not self._include_prompt and output_value == "sentence_embedding":
                raise ValueError(
                    f"SentenceEncoder.encode(): the model's Pooling config sets include_prompt "
                    f"false: sentence-transformers leaves the prompt's tokens out of the pooling, "
                    f"qkv pools over every token. Encode without the prompt {prompt!r} (and "
                    f"default_prompt_name), or set include_prompt to true in that config")
            texts = [prompt + text for text in texts]

        update, close = _progress_bar(len(texts), bool(show_progress_bar))
        try:
            if output_value == "token_embeddings":
                out = self._encoder.token_embeddings(texts, int(batch_size), update)
                if not convert_to_numpy:
                    out = [_torch().from_numpy(t) for t in out]
                return out[0] if single else out
            out = self._encoder.encode(texts, int(batch_size), update)
        finally:
            close()
        truncate_dim = _check_truncate_dim(self.truncate_dim if truncate_dim is None
                                           else truncate_dim, "SentenceEncoder.encode()")
        if truncate_dim is not None:
            out = np.ascontiguousarray(out[:, :int(truncate_dim)])
        if normalize_embeddings:  # torch.nn.functional.normalize: x / max(‖x‖, 1e-12)
            norms = np.linalg.norm(out.astype(np.float64), axis=1, keepdims=True)
            out = (out / np.maximum(norms, 1e-12)).astype(np.float32)
        if convert_to_tensor:
            out = _torch().from_numpy(out)
        elif not convert_to_numpy:
            out = list(_torch().from_numpy(out))
        return out[0] if single else out

    def __call__(self, features):
        """sentence-transformers' forward: the model called on tokenize()'s
        features ({"input_ids": [B, T], "attention_mask": [B, T]}, torch
        tensors or arrays; token_type_ids, when given, must be all 0, the one
        segment this model reads) -> the features plus "token_embeddings"
        [B, T, D] (every position, padding included) and "sentence_embedding"
        [B, D] (pooled, normalised when the model says so), torch tensors
        when the ids were, else numpy. Right padding only (as tokenize()
        gives); no autograd (qkv's encoder is for inference)."""
        if not isinstance(features, dict) or "input_ids" not in features \
                or "attention_mask" not in features:
            raise TypeError("SentenceEncoder(features): features must be a dict with "
                            "\"input_ids\" and \"attention_mask\", as tokenize() returns")
        torch = sys.modules.get("torch")
        as_torch = torch is not None and isinstance(features["input_ids"], torch.Tensor)

        def plain(x):
            return x.detach().cpu().numpy() if torch is not None and \
                isinstance(x, torch.Tensor) else np.asarray(x)

        types = features.get("token_type_ids")
        if types is not None and plain(types).any():
            raise ValueError("SentenceEncoder(features): token_type_ids must be all 0 (one "
                             "segment: qkv encodes single texts), got other values")
        tokens, pooled = self._encoder.forward_features(plain(features["input_ids"]),
                                                        plain(features["attention_mask"]))
        if as_torch:
            tokens, pooled = torch.from_numpy(tokens), torch.from_numpy(pooled)
        return {**features, "token_embeddings": tokens, "sentence_embedding": pooled}

    def encode_query(self, inputs, prompt_name=None, prompt=None, **kwargs):
        """encode() for queries, as sentence-transformers 6.2: without a prompt
        or prompt_name given, the prompt named "query" ("" unless the model or
        the constructor set one, so default_prompt_name does not apply).
        Other arguments as encode()."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kwargs)

    def encode_document(self, inputs, prompt_name=None, prompt=None, **kwargs):
        """encode() for documents, as sentence-transformers 6.2: without a
        prompt or prompt_name given, the first of the prompts named "document",
        "passage" and "corpus" in `prompts` ("document" is always there, ""
        unless set)."""
        if prompt_name is None and prompt is None:
            prompt_name = next((name for name in ("document", "passage", "corpus")
                                if name in self.prompts), None)
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kwargs)

    def _resolve_prompt(self, prompt, prompt_name):
        if prompt is not None:
            if prompt_name is not None:  # sentence-transformers warns and drops prompt_name
                raise ValueError(f"SentenceEncoder.encode(): give prompt or prompt_name, not "
                                 f"both (got prompt={prompt!r}, prompt_name={prompt_name!r})")
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise ValueError(f"SentenceEncoder.encode(): prompt name {prompt_name!r} not "
                                 f"found in the prompts {list(self.prompts)}")
            return self.prompts[prompt_name]
        if self.default_prompt_name is not None:
            return self.prompts.get(self.default_prompt_name)
        return None

    def similarity(self, embeddings1, embeddings2):
        """[N, D] (or [D]) and [M, D] (or [D]) embeddings -> [N, M] scores by
        similarity_fn_name, as sentence-transformers' similarity(): cosine
        (the default), dot, euclidean (negative L2 distance) or manhattan
        (negative L1 distance). numpy in gives numpy out (float32); a torch
        tensor (or a list of them) on either side gives a torch tensor."""
        return self._scores(embeddings1, embeddings2, pairwise=False)

    def similarity_pairwise(self, embeddings1, embeddings2):
        """[N, D] and [N, D] embeddings -> [N] scores of each row with the row
        of the same index, by similarity_fn_name (sentence-transformers'
        similarity_pairwise: the diagonal of similarity()). numpy in gives
        numpy out; a torch tensor on either side gives a torch tensor."""
        return self._scores(embeddings1, embeddings2, pairwise=True)

    def _scores(self, embeddings1, embeddings2, pairwise):
        a, a_torch = _as_matrix(embeddings1, "embeddings1")
        b, b_torch = _as_matrix(embeddings2, "embeddings2")
        if pairwise and a.shape != b.shape:
            raise ValueError(f"SentenceEncoder.similarity_pairwise(): the embeddings must have "
                             f"the same shape [N, D], got {list(a.shape)} and {list(b.shape)}")
        if a.shape[1] != b.shape[1]:
            raise ValueError(f"SentenceEncoder.similarity(): the embeddings have "
                             f"{a.shape[1]} and {b.shape[1]} dimensions")
        a, b = a.astype(np.float64), b.astype(np.float64)
        name = self.similarity_fn_name
        if name == "cosine":
            a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
            b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
        if pairwise:  # row i with row i
            if name in ("cosine", "dot"):
                scores = (a * b).sum(1)
            elif name == "euclidean":
                scores = -np.sqrt(((a - b) ** 2).sum(1))
            else:
                scores = -np.abs(a - b).sum(1)
        elif name in ("cosine", "dot"):
            scores = a @ b.T
        elif name == "euclidean":
            scores = -np.sqrt(np.maximum(
                (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0))
        else:
            scores = -np.abs(a[:, None, :] - b[None, :, :]).sum(-1)
        scores = scores.astype(np.float32)
        return _torch().from_numpy(scores) if a_torch or b_torch else scores

    @property
    def tokenizer(self):
        """The model's tokenizer with the call a Hugging Face tokenizer answers:
        tokenizer(text) -> {"input_ids": [...], "attention_mask": [...]}, and
        for a list of texts a list per key (unpadded, truncated to
        max_seq_length, [CLS] ... [SEP] included: the ids encode() feeds)."""
        return _Tokenizer(self)

    def tokenize(self, texts):
        """sentence-transformers' tokenize(): the texts padded to the longest,
        {"input_ids": [N, T] int64, "attention_mask": [N, T] int64} as torch
        tensors (numpy arrays when torch is not installed)."""
        rows = [self.token_ids(t) for t in _texts(texts, "SentenceEncoder.tokenize()")]
        width = max((len(r) for r in rows), default=0)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
            mask[i, :len(r)] = 1
        try:
            import torch
        except ImportError:
            return {"input_ids": ids, "attention_mask": mask}
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}

    def calibrate(self, texts):
        """int8: smooth the weights against the activations that the float32
        model shows on `texts` (a few dozen like those to be encoded), in
        place of the built-in calibration on random vocabulary words."""
        self._encoder.calibrate(list(texts))
        return self

    def token_ids(self, text):
        """The ids encode() feeds the model: [CLS] ... [SEP], truncated."""
        return self._encoder.token_ids(text)

    @property
    def dimension(self):
        """Size of an embedding (the model's hidden_size)."""
        return self._encoder.dimension

    def get_sentence_embedding_dimension(self):
        """sentence-transformers' name for `dimension` (truncate_dim when set)."""
        d = self._encoder.dimension
        return min(d, int(self.truncate_dim)) if self.truncate_dim is not None else d

    def get_max_seq_length(self):
        return self._encoder.max_seq_length

    @property
    def precision(self):
        """"float32", "bfloat16" or "int8", as given at construction."""
        return self._encoder.precision

    @property
    def max_seq_length(self):
        """Texts are truncated to this many tokens ([CLS] and [SEP] included).
        Settable, as in sentence-transformers: 2 <= value <= the model's
        max_position_embeddings."""
        return self._encoder.max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"SentenceEncoder.max_seq_length must be an int, got {value!r}")
        self._encoder.max_seq_length = int(value)

    @property
    def pooling(self):
        """"mean", "cls", "max" or "mean_sqrt_len_tokens" (sentence-transformers' names)."""
        return self._encoder.pooling

    @property
    def normalize(self):
        """Whether embeddings are L2-normalised (modules.json lists Normalize)."""
        return self._encoder.normalize


def _texts(texts, where):
    """A list of str from a str or a sequence of them."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{where}: texts[{i}] must be a str, got {type(text).__name__}")
    return texts


class _Tokenizer:
    """SentenceEncoder.tokenizer: token ids as a Hugging Face tokenizer's call
    gives them, from the encoder's own WordPiece tokenizer."""

    def __init__(self, encoder):
        self._encoder = encoder

    def __call__(self, text, **kwargs):
        if kwargs:
            raise TypeError(f"SentenceEncoder.tokenizer(): only the text is taken (padding, "
                            f"truncation and tensors: use SentenceEncoder.tokenize()), got "
                            f"{sorted(kwargs)}")
        rows = [self._encoder.token_ids(t) for t in _texts(text, "SentenceEncoder.tokenizer()")]
        if isinstance(text, str):
            return {"input_ids": rows[0], "attention_mask": [1] * len(rows[0])}
        return {"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]}

    @property
    def model_max_length(self):
        return self._encoder.max_seq_length


def _check_truncate_dim(truncate_dim, where):
    """None or a positive int; a larger one keeps every dimension, as in
    sentence-transformers (numpy would read 0 as none and -k as all but k)."""
    if truncate_dim is None:
        return None
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, (int, np.integer)) \
            or truncate_dim <= 0:
        raise ValueError(f"{where}: truncate_dim must be None or a positive int, "
                         f"got {truncate_dim!r}")
    return int(truncate_dim)


def _pooling_includes_prompt(model_dir):
    """The Pooling config's include_prompt (default true), found as the C++
    reader found it (module 1 of modules.json, which it has checked)."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return True
    with open(modules_file, encoding="utf-8") as f:
        modules = json.load(f)
    with open(model_dir / modules[1].get("path", "") / "config.json", encoding="utf-8") as f:
        include = json.load(f).get("include_prompt", True)
    if not isinstance(include, bool):
        raise ValueError(f"SentenceEncoder: {model_dir / modules[1].get('path', '')}/config.json:"
                         f" \"include_prompt\" must be true or false, got {include!r}")
    return include


def _check_device(device):
    if device is not None and str(device) not in ("cpu", "cpu:0"):
        raise ValueError(f"SentenceEncoder: qkv runs on the CPU only, got device={device!r}")
