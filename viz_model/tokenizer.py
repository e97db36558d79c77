"""Byte-level BPE tokenizers, trained and loaded with Hugging Face ``tokenizers``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.pre_tokenizers import ByteLevel

END_OF_TEXT = "<|endoftext|>"


def train_bpe(texts: Iterable[str], vocab_size: int, special_tokens: tuple[str, ...] = (END_OF_TEXT,)) -> Tokenizer:
    """Train a byte-level BPE tokenizer (GPT-2's scheme: Radford et al., 2019) on ``texts``.

    Every byte has a token of its own, so any text, in any script or with emoji, encodes without
    unknown tokens. ``vocab_size`` counts the 256 bytes, the merges and the special tokens.

    Raises:
        ValueError: when ``vocab_size`` is below 256 + the number of special tokens.
    """
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)} (the 256 bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                  initial_alphabet=ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _byte_decoder() -> dict[str, int]:
    # Inverse of GPT-2's bytes_to_unicode (openai/gpt-2, src/encoder.py): the printable characters
    # that byte-level BPE uses to stand for each of the 256 bytes.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_DECODER = _byte_decoder()


def token_bytes(tokenizer: Tokenizer, token_id: int) -> bytes:
    """The raw bytes a token stands for (a byte-level token may hold part of a UTF-8 character).

    Special tokens and tokens of non-byte-level tokenizers return their UTF-8 text.
    """
    piece = tokenizer.id_to_token(token_id)
    if piece is None:
        return b""
    if isinstance(tokenizer, IdTokenizer):
        return piece.encode("ascii")
    if _is_special(tokenizer, piece):
        return piece.encode("utf-8")
    if _byte_level(tokenizer):
        if all(ch in _BYTE_DECODER for ch in piece):
            return bytes(_BYTE_DECODER[ch] for ch in piece)
        return piece.encode("utf-8")
    if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):  # SentencePiece byte fallback (Llama)
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")  # SentencePiece marks a leading space with ▁


def _byte_level(tokenizer: Tokenizer) -> bool:
    """Whether tokens are spelled in GPT-2's byte-to-character alphabet (a ByteLevel decoder)."""
    dec = tokenizer.decoder
    return isinstance(dec, decoders.ByteLevel) or isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel)


def _is_special(tokenizer: Tokenizer, piece: str) -> bool:
    return any(t.content == piece and t.special for t in tokenizer.get_added_tokens_decoder().values())


def count_chars(tokenizer: Tokenizer, ids: Iterable[int]) -> int:
    """Number of characters the tokens stand for: the UTF-8 start bytes in their bytes.

    Summed over a whole encoding this equals ``len(text)``; bits per character use it.
    """
    return sum(sum(1 for b in token_bytes(tokenizer, i) if b & 0xC0 != 0x80) for i in ids)


def tokenizer_kind(tokenizer: Tokenizer) -> str:
    """A short description such as ``byte-level BPE`` or ``WordPiece``."""
    if isinstance(tokenizer, IdTokenizer):
        return "none (the checkpoint has no tokenizer: type token ids)"
    model = type(tokenizer.model).__name__
    byte_level = isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel) or "ByteLevel" in tokenizer.to_str()[:4000]
    return f"byte-level {model}" if byte_level and model == "BPE" else model


def iter_chunks(text: str, size: int = 1 << 16) -> Iterator[str]:
    """Split ``text`` at line ends into pieces of about ``size`` characters (for batch encoding)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end == -1 else end + 1
        yield text[start:end]
        start = end


class IdEncoding:
    """What :meth:`IdTokenizer.encode` returns: ``ids`` and the character span of each in the text."""

    def __init__(self, ids: list[int], offsets: list[tuple[int, int]]) -> None:
        self.ids, self.offsets = ids, offsets


class IdTokenizer:
    """A stand-in for a checkpoint that came without a tokenizer: the text *is* the token ids, written as
    integers separated by spaces or commas (``"464 3290 318"``). It offers the part of the
    ``tokenizers.Tokenizer`` interface the app uses; tokens are shown as ``#id``.

    Raises:
        ValueError: from :meth:`encode`, for anything that is not an id in ``[0, d_vocab)``.
    """

    model = None
    pre_tokenizer = None

    def __init__(self, d_vocab: int) -> None:
        self.d_vocab = d_vocab

    def encode(self, text: str) -> IdEncoding:
        ids, offsets = [], []
        for match in re.finditer(r"[^\s,]+", text):
            piece = match.group()
            if not piece.isascii() or not piece.isdigit():
                raise ValueError(f"this model has no tokenizer, so the text must be token ids (integers); "
                                 f"{piece[:20]!r} is not one")
            if int(piece) >= self.d_vocab:
                raise ValueError(f"token id {piece} is outside this model's vocabulary [0, {self.d_vocab})")
            ids.append(int(piece))
            offsets.append(match.span())
        return IdEncoding(ids, offsets)

    def id_to_token(self, token_id: int) -> str:
        return f"#{token_id}"

    def token_to_id(self, token: str) -> int | None:
        return int(token[1:]) if token.startswith("#") and token[1:].isdigit() else None

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids)

    def get_vocab_size(self) -> int:
        return self.d_vocab

    def get_added_tokens_decoder(self) -> dict:
        return {}

    def to_str(self) -> str:
        return ""
