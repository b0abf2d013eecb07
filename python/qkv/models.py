"""Decoder-only language models and generation with a KV cache.

    import qkv
    model = qkv.DecoderModel(qkv.DecoderModelConfig(vocab_size=256, d_model=384,
                                                    num_layers=6, num_heads=6))
    ids = model.generate([72, 105], max_new_tokens=50, temperature=0.8, top_k=40, seed=1)
    logits = model(ids_array)                 # [B, T] or [T] -> [B, T, vocab]
    model.save("tiny.safetensors")            # `qkv generate tiny.safetensors` prints from it

Parameter names (state_dict) follow LLaMA's: tok_embeddings.weight,
layers.<i>.attention_norm.weight, layers.<i>.attention.{q,k,v,o}_proj.weight,
layers.<i>.ffn_norm.weight, layers.<i>.feed_forward.{w1,w2,w3}.weight (SwiGLU)
or .linear1/.linear2 (GELU), norm.weight, output.weight (untied head only),
pos_embeddings.weight (learned positions only).
"""

import dataclasses as _dataclasses
import json as _json

from . import _core
from ._parameters import WrappedModelParameters

__all__ = ["DecoderModel", "DecoderModelConfig", "DecoderSession"]

from .bert import BertModel  # noqa: E402  (BERT encoders live in bert.py)

__all__ += ["BertModel"]


@_dataclasses.dataclass
class DecoderModelConfig:
    """The shape of a DecoderModel (the fields of qkv::nn::DecoderModelConfig).

    positions: "rope" | "learned" | "sinusoidal"; norm: "rmsnorm" | "layernorm";
    ffn: "swiglu" | "gelu" | "geglu"; rope_style: "half_split" | "interleaved";
    num_kv_heads 0 means num_heads; ffn_hidden 0 means 4·d_model (GELU) or
    8/3·d_model rounded up to a multiple of 64 (SwiGLU).
    """

    vocab_size: int = 256
    d_model: int = 384
    num_layers: int = 6
    num_heads: int = 6
    num_kv_heads: int = 0
    ffn_hidden: int = 0
    max_seq_len: int = 1024
    positions: str = "rope"
    rope_base: float = 10000.0
    rope_style: str = "half_split"
    # [] or head_dim / 2 divisors of the RoPE frequencies (Llama 3's rope_freqs)
    rope_freq_factors: list = _dataclasses.field(default_factory=list)
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    ffn: str = "swiglu"
    tie_embeddings: bool = True
    bias: bool = False
    dtype: str = "float32"
    # The newer families' options (qkv::nn::DecoderModelConfig says what each does):
    head_dim: int = 0  # 0 means d_model / num_heads
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    attention_scale: float = 0.0  # 0 means 1/sqrt(head_dim)
    embedding_scale: float = 1.0
    sliding_windows: list = _dataclasses.field(default_factory=list)  # [] or one per layer
    sliding_rope_base: float = 0.0  # 0 means rope_base
    final_logit_softcap: float = 0.0

    def to_json(self):
        return _json.dumps(_dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text):
        # The C++ reader first: json.loads would recurse into deep nesting
        # (RecursionError) and take 1e400 for inf.
        _core.check_decoder_config_json(text)
        return cls(**_json.loads(text))


def _generation_args(max_new_tokens, temperature, top_k, top_p, seed, stop_token):
    """The one tuple _core's generate and decode take."""
    max_new_tokens = int(max_new_tokens)
    if not 0 <= max_new_tokens < 1 << 63:
        raise ValueError(f"max_new_tokens must be in [0, 2**63), got {max_new_tokens}")
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return (max_new_tokens, float(temperature), int(top_k), float(top_p), seed,
            None if stop_token is None else int(stop_token))


class DecoderModel(WrappedModelParameters):
    """Token embedding, positions, N pre-norm blocks (GQA attention, SwiGLU or
    GELU FFN), final norm and an output head tied to the embedding or not.

    DecoderModel(config=None, *, generator=None, **fields): fields override
    those of `config` (a DecoderModelConfig). Parameters are initialised as
    torch initialises the modules they mirror, from `generator` (a
    qkv.Generator) or the default generator.
    """

    def __init__(self, config=None, *, generator=None, **fields):
        config = _dataclasses.replace(config or DecoderModelConfig(), **fields)
        self._model = _core.DecoderModel(config.to_json(), generator)
        self.metadata = {}

    @classmethod
    def _wrap(cls, core, metadata):
        self = cls.__new__(cls)
        self._model = core
        self.metadata = dict(metadata)
        return self

    @property
    def config(self):
        """The DecoderModelConfig, with defaults filled in."""
        return DecoderModelConfig.from_json(self._model.config_json())

    def forward(self, ids):
        """ids: [T] or [B, T] ints  ->  logits [B, T, vocab] (numpy, causal)."""
        return self._model.forward(ids)

    __call__ = forward

    def save(self, path, metadata=None):
        """Writes a safetensors file with the config in its metadata (what
        `qkv generate` and DecoderModel.load read). `metadata`: extra str -> str."""
        self._model.save(str(path), dict(metadata or {}))

    @classmethod
    def load(cls, path):
        """Reads a file written by save(); its metadata is kept in .metadata."""
        core, metadata = _core.DecoderModel.load(str(path))
        return cls._wrap(core, metadata)

    def generate(self, prompt_ids, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                 stop_token=None):
        """Continues prompt_ids ([T] ints) with up to max_new_tokens ids (a list).

        temperature 0 is greedy; top_k 0 and top_p 1 keep every token. The same
        seed gives the same ids. Decodes with a KV cache: one pass over the
        prompt, then one cached step per new token.
        """
        return self._model.generate(prompt_ids, _generation_args(
            max_new_tokens, temperature, top_k, top_p, seed, stop_token))

    def session(self, batch_size=1, max_len=None):
        """A DecoderSession (KV cache + step buffers) of max_len positions
        (default config.max_seq_len)."""
        return DecoderSession(self, batch_size, max_len)


class DecoderSession:
    """Step-by-step decoding with a KV cache over a DecoderModel.

        s = model.session()
        logits = s.prefill(prompt_ids)        # [B, vocab] of the last position
        logits = s.step([next_id])            # one token per sequence
        ids = s.decode(100, temperature=0.8)  # batch 1: sample and feed back
    """

    def __init__(self, model, batch_size=1, max_len=None):
        self._model = model
        self._session = _core.DecoderSession(model._model, int(batch_size),
                                             0 if max_len is None else int(max_len))

    def prefill(self, ids):
        """Feeds [T] (batch 1) or [B, T] ids in one pass -> logits [B, vocab]."""
        return self._session.prefill(ids)

    def step(self, tokens):
        """Feeds one token per sequence ([B] ids) -> logits [B, vocab]."""
        return self._session.step(tokens)

    def decode(self, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=0,
               stop_token=None):
        """Batch 1: samples up to max_new_tokens ids continuing what the session
        holds, feeding each back -> list of ids."""
        return self._session.decode(_generation_args(max_new_tokens, temperature, top_k, top_p,
                                                     seed, stop_token))

    def reset(self):
        self._session.reset()

    length = property(lambda self: self._session.length)
    max_len = property(lambda self: self._session.max_len)
    batch_size = property(lambda self: self._session.batch_size)


class GgufModel:
    """A pretrained model from a GGUF file (qkv::models::load_gguf_model):
    a DecoderModel, its byte-level BPE tokenizer and its chat template.

        m = qkv.models.load_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        ids = m.generate("The capital of France is", max_new_tokens=20)   # greedy
        print(m.tokenizer.decode(ids))
        logits = m.logits(m.tokenizer.encode("Hello"))   # [1, T, vocab]

    Attributes: model (DecoderModel), tokenizer (qkv.text.BpeTokenizer),
    architecture, name, exact, kv_cache ("f32" or "q8_0": how the KV caches of
    generate() and model.session() keep keys and values), chat_template (jinja source or None),
    end_of_turn (the id that ends a reply: <|im_end|> or eos, or None).
    """

    def __init__(self, core_model, core_tokenizer, info):
        from .text import BpeTokenizer

        self.model = DecoderModel._wrap(core_model, {})
        self.tokenizer = BpeTokenizer.__new__(BpeTokenizer)
        self.tokenizer._impl = core_tokenizer
        self.architecture = info["architecture"]
        self.name = info["name"]
        self.exact = info["exact"]
        self.kv_cache = info["kv_cache"]
        self.chat_template = info["chat_template"]
        self.end_of_turn = info["end_of_turn"]

    def logits(self, ids):
        """ids: [T] or [B, T] ints  ->  logits [B, T, vocab] (numpy float32)."""
        return self.model.forward(ids)

    def generate(self, prompt, max_new_tokens, greedy=True, temperature=1.0, top_k=0, top_p=1.0,
                 seed=0, stop_at_end_of_turn=True):
        """Continues `prompt` (text, encoded with the tokenizer, or [T] ids)
        with up to max_new_tokens new ids (a list; tokenizer.decode gives the
        text). Greedy unless greedy=False (then temperature/top_k/top_p/seed
        sample). Stops after end_of_turn when stop_at_end_of_turn."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, (str, bytes)) else prompt
        stop = self.end_of_turn if stop_at_end_of_turn else None
        return self.model.generate(ids, max_new_tokens, 0.0 if greedy else temperature, top_k,
                                   top_p, seed, stop)


def load_gguf(path, exact=False, max_seq_len=8192, kv_cache="f32"):
    """Loads a GGUF decoder file (llama, qwen2, qwen3 or gemma3) -> GgufModel.

    Llama 3's RoPE frequency factors (rope_freqs.weight) are applied; a key or
    tensor that changes the math and that qkv does not implement (RoPE scaling
    other than Llama 3's, logit softcapping, biases, a block past block_count,
    ...) is a ValueError naming it (include/qkv/models/gguf_model.h).

    exact=False keeps the weights in their quantized blocks (read in place from
    the file's mapping); exact=True dequantizes every weight to float32.
    max_seq_len caps the file's context length (the KV cache size).
    kv_cache: "f32" keeps cached keys and values in float32, "q8_0" in 8-bit
    blocks of 32 with a float32 scale (about 3.6x less memory).
    """
    return GgufModel(*_core.load_gguf(str(path), bool(exact), int(max_seq_len), str(kv_cache)))


__all__ += ["GgufModel", "load_gguf"]
