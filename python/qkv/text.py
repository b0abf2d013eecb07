"""Text to token ids: BERT's WordPiece tokenizer.

    import qkv
    tok = qkv.text.WordPieceTokenizer.from_json("models/all-MiniLM-L6-v2/tokenizer.json")
    tok.tokenize("Unaffable!")               # ['una', '##ffa', '##ble', '!']
    tok.encode("Hello world")                # [101, 7592, 2088, 102]
    ids, mask = tok.encode_batch(["a", "b c"])   # int64 arrays [batch, length]

The ids equal those of Hugging Face `tokenizers` (BertNormalizer,
BertPreTokenizer, WordPiece, TemplateProcessing) for the same tokenizer.json,
including its truncation and padding settings. Texts are str, or bytes in
UTF-8 where each invalid sequence becomes U+FFFD (dropped by clean_text); a
str holding a lone surrogate cannot be encoded to UTF-8 and raises TypeError.
"""

import collections

from . import _core

__all__ = ["BatchEncoding", "WordPieceTokenizer"]

BatchEncoding = collections.namedtuple("BatchEncoding", ["ids", "attention_mask"])
BatchEncoding.__doc__ = """ids and attention_mask: numpy int64 arrays [batch, length];
the mask is 1 for real tokens and 0 for padding."""

_DEFAULT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


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
