"""Sentence embeddings, as sentence-transformers computes them for a
Transformer -> Pooling (-> Normalize) model such as all-MiniLM-L6-v2.

    import qkv
    encoder = qkv.SentenceEncoder("models/all-MiniLM-L6-v2")
    e = encoder.encode(["A cat sits on the mat.", "A dog runs."])   # [2, 384] float32
    cosine = e @ e.T                                                # rows have norm 1

    fast = qkv.SentenceEncoder("models/all-MiniLM-L6-v2", precision="int8")
"""

import os

from . import _core

__all__ = ["SentenceEncoder"]


class SentenceEncoder:
    """Reads a sentence-transformers model directory: config.json,
    model.safetensors, tokenizer.json, modules.json, the pooling config
    (1_Pooling/config.json) and sentence_bert_config.json or tokenizer_config.json
    (max_seq_length), as written by sentence-transformers before or from version 6.

    Tokenizes with qkv's WordPiece tokenizer, runs qkv's BertModel, pools
    (mean over real tokens for all-MiniLM-L6-v2; CLS, max and mean·√len are
    read too) and L2-normalises when modules.json lists Normalize.

    precision: the arithmetic of the transformer's layers. "float32" (the
    default) matches sentence-transformers; "bfloat16" ("bf16") multiplies
    bfloat16 values with float32 sums; "int8" multiplies int8 weights (one
    scale per output channel) by int8 activations (one scale per token).
    Weights are converted once, here; embeddings are float32 in every case.
    """

    def __init__(self, model_dir, precision="float32"):
        self._encoder = _core.SentenceEncoder(os.fspath(model_dir), str(precision))

    def encode(self, sentences, batch_size=32):
        """sentences: a str or a list of str  ->  [D] or [N, D] float32 numpy.

        Texts are processed in batches of `batch_size` with similar token
        counts (sorted by length, so little padding is computed); rows come
        back in the order of `sentences`. Longer texts are truncated to
        max_seq_length tokens, as by sentence-transformers.
        """
        if isinstance(sentences, str):
            return self._encoder.encode([sentences], int(batch_size))[0]
        return self._encoder.encode(list(sentences), int(batch_size))

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
        """sentence-transformers' name for `dimension`."""
        return self._encoder.dimension

    @property
    def precision(self):
        """"float32", "bfloat16" or "int8", as given at construction."""
        return self._encoder.precision

    @property
    def max_seq_length(self):
        return self._encoder.max_seq_length

    @property
    def pooling(self):
        """"mean", "cls", "max" or "mean_sqrt_len_tokens" (sentence-transformers' names)."""
        return self._encoder.pooling

    @property
    def normalize(self):
        """Whether embeddings are L2-normalised (modules.json lists Normalize)."""
        return self._encoder.normalize
