"""Text to token ids: BERT's WordPiece tokenizer, byte-level BPE (GPT-2,
SmolLM2) and Jinja chat templates.

    import qkv
    tok = qkv.text.WordPieceTokenizer.from_json("models/all-MiniLM-L6-v2/tokenizer.json")
    tok.tokenize("Unaffable!")               # ['una', '##ffa', '##ble', '!']
    tok.encode("Hello world")                # [101, 7592, 2088, 102]
    ids, mask = tok.encode_batch(["a", "b c"])   # int64 arrays [batch, length]

The ids equal those of Hugging Face `tokenizers` (BertNormalizer,
BertPreTokenizer, WordPiece, TemplateProcessing) for the same tokenizer.json,
including its truncation and padding settings.

    tok = qkv.text.BpeTokenizer(tokens, merges, token_types, pre_tokenizer="smollm")
    tok.encode("<|im_start|>user\nHi<|im_end|>")   # [1, 4093, 198, 26843, 2]
    tok.decode([19556, 905])                      # 'Hello world'
    qkv.text.ChatTemplate.from_jinja(template).apply(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True)

The BPE tokenizer is built from the GGUF tokenizer.ggml.* fields as lists. Texts are str, or bytes in
UTF-8 where each invalid sequence becomes U+FFFD (dropped by clean_text); a
str holding a lone surrogate cannot be encoded to UTF-8 and raises TypeError.
"""

import collections as _collections
import json as _json

from . import _core

__all__ = ["BatchEncoding", "BpeStreamDecoder", "BpeTokenizer", "ChatTemplate",
           "WordPieceTokenizer", "render_chat_template"]

BatchEncoding = _collections.namedtuple("BatchEncoding", ["ids", "attention_mask"])
BatchEncoding.__doc__ = """ids and attention_mask: numpy int64 arrays [batch, length];
the mask is 1 for real tokens and 0 for padding."""

_DEFAULT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _token_id(value, vocab_size, what, name="token id "):
    """`value` as an int in [0, vocab_size), else the error naming it as given
    (the C++ side takes int32: a larger Python int must not reach it)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what}: token ids must be ints, got {name}{value!r}")
    i = value.__index__()
    if not 0 <= i < vocab_size:
        raise ValueError(f"{what}: {name}{i} is out of range [0, {vocab_size})")
    return i


class WordPieceTokenizer:
    """BERT's WordPiece tokenizer (qkv::text::WordPieceTokenizer).

    Make one with WordPieceTokenizer.from_json(path) (a Hugging Face
    tokenizer.json; every option comes from the file) or
    WordPieceTokenizer.from_vocab(path, ...) (a vocab.txt and keyword options).
    """

    def __init__(self, impl):
        if not isinstance(impl, _core.WordPieceTokenizer):
            raise TypeError("use WordPieceTokenizer.from_json() or .from_vocab()")
        self._impl = impl

    @classmethod
    def from_json(cls, path):
        """Reads a tokenizer.json whose model is WordPiece (OSError if it cannot
        be read, ValueError naming the problem if its content is wrong)."""
        return cls(_core.WordPieceTokenizer.from_json(str(path)))

    @classmethod
    def from_vocab(cls, path, *, lowercase=True, strip_accents=None, handle_chinese_chars=True,
                   clean_text=True, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                   pad_token="[PAD]", special_tokens=_DEFAULT_SPECIAL_TOKENS,
                   continuing_subword_prefix="##", max_input_chars_per_word=100,
                   max_length=512):
        """Reads a vocab.txt (one token per line, id = line number).

        The options are BertNormalizer's (strip_accents None follows
        lowercase) and WordPiece's; special_tokens are matched verbatim in the
        raw text; cls_token/sep_token may be None for no [CLS]/[SEP];
        max_length None or 0 means no truncation.
        """
        o = _core.WordPieceOptions()
        o.lowercase = bool(lowercase)
        o.strip_accents = bool(lowercase if strip_accents is None else strip_accents)
        o.split_chinese_chars = bool(handle_chinese_chars)
        o.clean_text = bool(clean_text)
        o.unk_token = unk_token
        o.cls_token = cls_token or ""
        o.sep_token = sep_token or ""
        o.pad_token = pad_token or ""
        o.special_tokens = list(special_tokens)
        o.continuing_prefix = continuing_subword_prefix
        o.max_input_chars_per_word = int(max_input_chars_per_word)
        o.max_length = int(max_length or 0)
        return cls(_core.WordPieceTokenizer.from_vocab(str(path), o))

    def basic_tokenize(self, text):
        """The words of BERT's basic tokenizer (normalised, split on whitespace
        and punctuation), before word pieces."""
        return self._impl.basic_tokenize(text)

    def tokenize(self, text):
        """Word pieces of `text`, without [CLS]/[SEP] and without truncation."""
        return self._impl.tokenize(text)

    def encode(self, text):
        """Ids [CLS] … [SEP] of `text` as a list, truncated to max_length and
        not padded (tokenizers' Encoding.ids where attention_mask is 1)."""
        return self._impl.encode(text)

    def encode_batch(self, texts):
        """BatchEncoding(ids, attention_mask) of int64 arrays [batch, length],
        padded with [PAD] to the longest text, or to the fixed length of the
        tokenizer.json's padding (see enable_padding)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("encode_batch() takes a list of texts, got a single text")
        ids, mask = self._impl.encode_batch(list(texts))
        return BatchEncoding(ids, mask)

    def enable_truncation(self, max_length):
        """Truncates encodings to max_length tokens, [CLS] and [SEP] included."""
        self._impl.set_max_length(int(max_length))

    def no_truncation(self):
        self._impl.set_max_length(0)

    def enable_padding(self, length=None, pad_to_multiple_of=None):
        """Pads batches to `length` (None: to the longest row), rounded up to a
        multiple of pad_to_multiple_of."""
        self._impl.set_padding(int(length or 0), int(pad_to_multiple_of or 0))

    @property
    def max_length(self):
        """Truncation length incl. [CLS]/[SEP]; None when not truncating."""
        return self._impl.options().max_length or None

    def token_to_id(self, token):
        """The id of `token`, or None when it is not in the vocabulary."""
        i = self._impl.token_to_id(token)
        return None if i < 0 else i

    def id_to_token(self, id):
        """The token of `id`, or None when it is out of range."""
        id = int(id)
        return self._impl.id_to_token(id) if 0 <= id < self.vocab_size else None

    @property
    def vocab_size(self):
        """Number of tokens, added tokens included."""
        return self._impl.vocab_size()

    def __repr__(self):
        o = self._impl.options()
        return (f"WordPieceTokenizer(vocab_size={self.vocab_size}, lowercase={o.lowercase}, "
                f"strip_accents={o.strip_accents}, max_length={o.max_length})")


class BpeTokenizer:
    """BPE (qkv::text::BpeTokenizer), from the vocabulary as lists, or from a
    GGUF file's metadata with BpeTokenizer.from_gguf(path).

    model: "gpt2" (byte-level BPE: merges in rank order) or "llama"
    (SentencePiece-style: a score per token, "▁" for spaces, byte fallback);
    tokens: id -> token text; merges: "a b" strings in rank order ("gpt2");
    scores: one float per token ("llama"); token_types: GGUF token types (1
    normal, 3 control, 4 user-defined, 6 byte, ...), None for all normal;
    pre_tokenizer: "gpt2", "smollm", "qwen2" or "llama-bpe" for "gpt2",
    "default" for "llama" (None: those defaults); add_space_prefix ("llama"):
    "▁" before the text; bos/eos/unk/pad: ids or None; add_bos/add_eos:
    whether encode(add_special=True) adds them (see
    include/qkv/text/bpe_tokenizer.h). A wrong vocabulary raises ValueError
    naming the field and the index.
    """

    def __init__(self, tokens, merges=(), token_types=None, *, model="gpt2", scores=None,
                 pre_tokenizer=None, add_space_prefix=False, bos=None, eos=None, unk=None,
                 pad=None, add_bos=False, add_eos=False):
        types = [] if token_types is None else [int(t) for t in token_types]
        scores = [] if scores is None else [float(s) for s in scores]
        if pre_tokenizer is None:
            pre_tokenizer = "default" if model == "llama" else "gpt2"
        self._impl = _core.BpeTokenizer(str(model), list(tokens), list(merges), scores, types,
                                        str(pre_tokenizer), bool(add_space_prefix), bos, eos,
                                        unk, pad, bool(add_bos), bool(add_eos))

    @classmethod
    def from_gguf(cls, path):
        """The tokenizer of a GGUF file (its tokenizer.ggml.* metadata, as
        qkv.models.load_gguf builds it), without reading the weights."""
        self = cls.__new__(cls)
        self._impl = _core.BpeTokenizer.from_gguf(str(path))
        return self

    def encode(self, text, add_special=True, parse_special=True):
        """Token ids of `text` (str, or bytes where invalid UTF-8 becomes
        U+FFFD); control tokens written in the text are matched when
        parse_special; bos/eos are added when add_special and the vocabulary
        asks for them."""
        return self._impl.encode(text, bool(add_special), bool(parse_special))

    def decode(self, ids, skip_special=False):
        """The text of `ids` (control tokens left out when skip_special);
        bytes that are not valid UTF-8 become U+FFFD. ValueError for ids out
        of range."""
        n = self.vocab_size
        ids = [_token_id(id, n, "decode()", f"ids[{i}] = ") for i, id in enumerate(ids)]
        return self._impl.decode(ids, bool(skip_special))

    def pre_tokenize(self, text):
        """The pieces the pre-tokenizer cuts `text` into (no special tokens)."""
        return self._impl.pre_tokenize(text)

    def token_to_piece(self, id):
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        return self._impl.token_to_piece(_token_id(id, self.vocab_size, "token_to_piece()"))

    def id_to_token(self, id):
        """The vocabulary text of `id` (byte-level characters)."""
        return self._impl.token(_token_id(id, self.vocab_size, "id_to_token()"))

    def token_to_id(self, token):
        """The id of the vocabulary text `token`, or None."""
        return self._impl.id_of(token)

    @property
    def vocab_size(self):
        return self._impl.size()

    bos_token_id = property(lambda self: self._impl.bos())
    eos_token_id = property(lambda self: self._impl.eos())
    unk_token_id = property(lambda self: self._impl.unk())
    pad_token_id = property(lambda self: self._impl.pad())

    def stream_decoder(self, skip_special=False):
        """A BpeStreamDecoder over this tokenizer."""
        return BpeStreamDecoder(self, skip_special)

    def __repr__(self):
        return (f"BpeTokenizer(model={self._impl.model()!r}, vocab_size={self.vocab_size}, "
                f"pre_tokenizer={self._impl.pre_tokenizer()!r})")


class BpeStreamDecoder:
    """Text of a token stream as it arrives: push(id) returns what is complete,
    holding back the bytes of a UTF-8 character split across tokens; finish()
    returns the rest. Everything pushed and finished equals decode(ids)."""

    def __init__(self, tokenizer, skip_special=False):
        self._impl = _core.BpeStreamDecoder(tokenizer._impl, bool(skip_special))
        self._vocab_size = tokenizer.vocab_size

    def push(self, id):
        return self._impl.push(_token_id(id, self._vocab_size, "push()"))

    def finish(self):
        return self._impl.finish()


class ChatTemplate:
    """A Jinja chat template (qkv::text::ChatTemplate), run by qkv's own Jinja
    interpreter as transformers' apply_chat_template(..., tokenize=False) runs
    it with jinja2.

    ChatTemplate.from_jinja(source) parses a GGUF/transformers chat template
    (ValueError naming the line of a syntax error); ChatTemplate.builtin(name)
    is one of builtin_names() (chatml, gemma, llama3, qwen). apply(messages,
    add_generation_prompt, **variables) renders messages (dicts: role, content,
    and whatever else the template reads, e.g. tool_calls); variables such as
    enable_thinking=False or tools reach the template as they are.
    bos_token and eos_token are given at construction or as variables.
    """

    def __init__(self, *, _impl):
        self._impl = _impl

    @classmethod
    def from_jinja(cls, source, bos_token="", eos_token=""):
        return cls(_impl=_core.ChatTemplate.from_jinja(source, bos_token or "", eos_token or ""))

    @classmethod
    def builtin(cls, name, bos_token="", eos_token=""):
        return cls(_impl=_core.ChatTemplate.builtin(name, bos_token or "", eos_token or ""))

    @staticmethod
    def builtin_names():
        return _core.ChatTemplate.builtin_names()

    @property
    def source(self):
        return self._impl.source()

    def apply(self, messages, add_generation_prompt=False, **variables):
        context = dict(variables)
        context["messages"] = list(messages)
        context["add_generation_prompt"] = bool(add_generation_prompt)
        try:
            encoded = _json.dumps(context, ensure_ascii=False, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"chat template variables must be JSON data: {e}") from None
        return self._impl.render_json(encoded)


def render_chat_template(template, messages, add_generation_prompt=False, bos_token="",
                         eos_token="", **variables):
    """The prompt text of `messages` by the Jinja chat template `template`:
    transformers' apply_chat_template(messages, chat_template=template,
    tokenize=False, add_generation_prompt=..., bos_token=..., eos_token=...,
    **variables), rendered by qkv (see ChatTemplate)."""
    variables.setdefault("bos_token", bos_token)
    variables.setdefault("eos_token", eos_token)
    return ChatTemplate.from_jinja(template).apply(messages, add_generation_prompt, **variables)
