"""What a family module provides: config mapping, key map, tokenizer with its language policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..architecture import ModelConfig
from .layout import Parts


@dataclass(frozen=True)
class Languages:
    """A model's own language codes (fra_Latn, fr_XX, fr, fra, de): () when the model does not say."""

    source: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    default_source: str | None = None
    default_target: str | None = None
    target_forced: bool = False  # the target is a token forced first: a translation must name one


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
    load_tokenizer: Callable[[Path, ModelConfig], Tokenizer]
