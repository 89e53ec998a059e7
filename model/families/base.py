"""What a family module provides: config mapping, key map, tokenizer with its language policy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import sentencepiece
from tokenizers import Tokenizer as HFTokenizersTokenizer

from ..architecture import ModelConfig
from ..config import read_json
from ..errors import CheckpointError
from .layout import Parts


@dataclass(frozen=True)
class Languages:
    """A model's own language codes (fra_Latn, fr_XX, fr, fra, de): () when the model does not say."""

    source: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    default_source: str | None = None
    default_target: str | None = None
    target_required: bool = False  # a token names the target (forced first, or MADLAD's <2xx>): a translation needs one


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

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
