"""What a family module provides: config mapping, key map, tokenizer with its language policy."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Protocol

import sentencepiece
from tokenizers import Tokenizer as HFTokenizersTokenizer

from ...errors import CheckpointError
from ...network.architecture import ModelConfig
from ..config import read_json
from .layout import Parts

BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a SentencePiece byte-fallback piece


@dataclass(frozen=True)
class Languages:
    """A model's own language codes (fra_Latn, fr_XX, fr, fra, de): () when the model does not say."""

    source: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    default_source: str | None = None
    default_target: str | None = None
    target_required: bool = False  # a token names the target (forced first, or MADLAD's <2xx>): a translation needs one
    named_target: re.Pattern | None = None  # how a text may name its target at its start (MADLAD: <2pt>), group 1

    def split_named_target(self, text: str) -> tuple[str | None, str]:
        """(the target `text` names at its start, the text after it), or (None, text) when it names none."""
        match = self.named_target.match(text) if self.named_target else None
        if match is None or match.group(1) not in self.target:
            return None, text
        return match.group(1), text[match.end():]


class Tokenizer(Protocol):
    """Text ↔ ids, with the family's way of asking for a source and a target language (model codes)."""

    pad_id: int
    eos_id: int
    languages: Languages

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text → encoder ids (language tokens where the family puts them, </s> appended)."""

    def forced_bos(self, target_lang: str | None) -> int | None:
        """The token forced as the first generated one for `target_lang` (transformers' forced_bos_token_id)."""

    def decode(self, token_ids: list[int]) -> str:
        """Generated ids → text, special and language tokens skipped."""

    def encode_target(self, text: str) -> list[int]:
        """Target text → the ids the model generates for it inside running text (a word's start, no special
        tokens): how a glossary's target term becomes a constraint."""

    def token_bytes(self, token_ids: list[int], source: bool = False) -> list[bytes]:
        """What each id spells, as UTF-8 (a piece that starts a word with its leading space; special and language
        tokens as their names): how word alignment finds a token's words. `source`: ids of the source vocabulary."""


@dataclass(frozen=True)
class Family:
    name: str
    model_config: Callable[[dict, str], ModelConfig]  # config.json contents, its path → ModelConfig
    key_map: Callable[[ModelConfig], dict[str, Parts]]
    ignored_keys: Callable[[ModelConfig], tuple[str, ...]]
    load_tokenizer: Callable[[Path], Tokenizer]


def read_tokenizer_config(model_dir: Path) -> dict:
    path = model_dir / "tokenizer_config.json"
    return read_json(path) if path.exists() else {}


def load_spm(path: Path) -> sentencepiece.SentencePieceProcessor:
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


def sentencepiece_bytes(piece: str) -> bytes:
    """A SentencePiece piece's text: ▁ is a space (a word starts there), <0xNN> one byte (byte fallback)."""
    byte = BYTE_FALLBACK.fullmatch(piece)
    return bytes([int(byte.group(1), 16)]) if byte else piece.replace("▁", " ").encode()


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, char → byte: printable bytes stand for themselves, the others (space: Ġ)
    for chr(256 + n) in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}


def special_token_pattern(tokens) -> re.Pattern:
    """Splits a text around special tokens (kept whole, longest first), as transformers' slow tokenizers do."""
    return re.compile("(" + "|".join(map(re.escape, sorted(tokens, key=len, reverse=True))) + ")")


class TokenizerJson:
    """A `tokenizers` tokenizer (tokenizer.json, or built in code), without its post-processor's special tokens."""

    def __init__(self, tokenizer: HFTokenizersTokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def read(cls, path: Path) -> "TokenizerJson":
        if not path.exists():
            raise CheckpointError(f"{path}: file not found")
        try:
            return cls(HFTokenizersTokenizer.from_file(str(path)))
        except Exception as e:  # the library raises plain Exceptions for malformed files
            raise CheckpointError(f"{path}: cannot read the tokenizer ({str(e).splitlines()[0]})") from None

    def token_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_word(self, text: str) -> list[int]:
        """`text` as it is spelled after a space: byte-level BPE marks the space in the first piece (Ġ), which
        its pre-tokenizer adds only at a text's start when the space is there; Metaspace adds ▁ itself."""
        return self.encode(" " + text if self._byte_level else text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_bytes(self, ids: list[int]) -> list[bytes]:
        pieces = [self.tokenizer.id_to_token(i) or "" for i in ids]
        if not self._byte_level:
            return [sentencepiece_bytes(p) for p in pieces]
        alphabet = self._byte_level
        return [b"".join(bytes([alphabet[c]]) if c in alphabet else c.encode() for c in p) for p in pieces]

    @cached_property
    def _byte_level(self) -> dict[str, int] | None:
        """The byte-level alphabet when the pieces are byte-level BPE (BART's), else None (SentencePiece's ▁)."""
        decoder = json.loads(self.tokenizer.to_str()).get("decoder") or {}
        kinds = {d.get("type") for d in decoder.get("decoders", [decoder])}
        return byte_level_alphabet() if "ByteLevel" in kinds else None


class PiecesTokenizer:
    """A family's tokenizer over a piece back-end (TokenizerJson or a SentencePiece one): decoding and token texts
    are the back-end's."""

    pieces: TokenizerJson  # or SentencePieceVocab, SentencePieceT5: the same decode and token_bytes

    def decode(self, token_ids: list[int]) -> str:
        return self.pieces.decode(token_ids)

    def encode_target(self, text: str) -> list[int]:
        return self.pieces.encode_word(text)  # one vocabulary for source and target

    def token_bytes(self, token_ids: list[int], source: bool = False) -> list[bytes]:
        return self.pieces.token_bytes(token_ids)
