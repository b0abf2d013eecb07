"""The attention explorer: every layer and head of a model on a text.

    import qkv
    a = qkv.explore("models/all-MiniLM-L6-v2", "The cat sat on the mat.")
    a.weights.shape          # (layers, heads, L, L): softmax weights, 0 where masked
    a.tokens                 # ['[CLS]', 'the', 'cat', ...]
    a.save("attention.html") # the page `qkv explore` writes
    a                        # in a notebook: the same page, inline

MODEL is a BERT / sentence-transformers directory or a GGUF file (loaded with
float32 weights), or an AttentionExplorer that keeps one loaded between calls.
The weights come from qkv's own attention kernel and equal transformers'
eager `output_attentions=True` (python/tests/test_explore.py checks it).
"""

import html as _html
import os

import numpy as np

from . import _core

__all__ = ["Attention", "AttentionExplorer", "explore"]

MAX_WEIGHTS = 1_000_000


class Attention:
    """The attention of one text through a model, as arrays and as a page.

    ids       list of the L token ids the model read
    tokens    list of L token strings; segments: 0 (text) or 1 (text_b) per token
    weights   float32 [layers, heads, L, L]: softmax weights, 0 where masked
    scores    float32 [layers, heads, L, L]: q·k before scaling and masks
    masked    bool [layers, heads, L, L]: True where query i may not read key j
    values    float32 [layers, kv_heads, L, head_dim]: what the weights average
    scales    list of the factor of q·k per layer (1/sqrt(head_dim))
    """

    def __init__(self, maps):
        self._maps = maps
        self.model = maps.model
        self.architecture = maps.architecture
        self.text = maps.text
        self.text_b = maps.text_b
        self.ids = list(maps.ids)
        self.tokens = list(maps.tokens)
        self.segments = list(maps.segments)
        self.scales = list(maps.scales)
        self.weights = np.asarray(maps.weights)
        self.scores = np.asarray(maps.scores)
        self.masked = ~np.asarray(maps.allowed)
        self.values = np.asarray(maps.values)

    def __repr__(self):
        layers, heads, length, _ = self.weights.shape
        return (f"Attention(model={self.model!r}, {length} tokens x {layers} layers x "
                f"{heads} heads)")

    def json(self):
        """The page's data as JSON text (what a server's endpoint returns)."""
        return self._maps.json()

    def html(self, live_endpoint=""):
        """The self-contained page (inline script and style, data as JSON).

        live_endpoint: a server's URL that answers POST {"text", "text_b"} with
        json() of another text; the page then has a text box that asks it.
        """
        return self._maps.html(live_endpoint)

    def save(self, path):
        """Writes the page to `path` (opens from file://, no network)."""
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(self.html())

    def _repr_html_(self):
        # The page in an iframe: its script and style stay apart from the notebook's.
        return ('<iframe style="width:100%;height:720px;border:0" sandbox="allow-scripts" '
                f'srcdoc="{_html.escape(self.html(), quote=True)}"></iframe>')

    def show(self):
        """Displays the page inline in a notebook (IPython.display), if there is one."""
        try:
            from IPython.display import HTML, display
        except ImportError as error:
            raise RuntimeError("Attention.show() needs IPython; use save(path) and open "
                               "the file in a browser instead") from error
        display(HTML(self._repr_html_()))


class AttentionExplorer:
    """A model loaded once, to explore many texts: explorer(text) -> Attention."""

    def __init__(self, model):
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError("explore(): model must be a path (a model directory or a GGUF "
                            f"file) or an AttentionExplorer, got {type(model).__name__}")
        self._core = _core.AttentionExplorer(os.fspath(model))

    @property
    def name(self):
        return self._core.name

    @property
    def causal(self):
        """True for a decoder (causal self-attention)."""
        return self._core.causal

    def __call__(self, text, text_b=None, *, max_weights=MAX_WEIGHTS, pad_to=0):
        if not isinstance(text, str):
            raise TypeError(f"explore(): text must be a str, got {type(text).__name__}")
        if text_b is not None and not isinstance(text_b, str):
            raise TypeError(f"explore(): text_b must be a str or None, got {type(text_b).__name__}")
        return Attention(self._core.explore(text, text_b or "", int(max_weights), int(pad_to)))


def explore(model, text, text_b=None, *, max_weights=MAX_WEIGHTS, pad_to=0):
    """The attention of `text` (and `text_b`) through every layer and head of `model`.

    model: a BERT / sentence-transformers directory, a GGUF file, or an
    AttentionExplorer. text_b: BERT reads [CLS] text [SEP] text_b [SEP]; a
    decoder reads text_b after text. pad_to: encoders only, pad with [PAD] to
    this many tokens (the padding is masked). max_weights: refuse inputs whose
    tokens² × layers × heads exceed it. Returns an Attention (arrays; a page
    with .save(path), inline in a notebook).
    """
    explorer = model if isinstance(model, AttentionExplorer) else AttentionExplorer(model)
    return explorer(text, text_b, max_weights=max_weights, pad_to=pad_to)
