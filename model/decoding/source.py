"""A text as the engine takes it: what the tokenizer and a glossary made of it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .search import DecodeParams


@dataclass(frozen=True)
class Source:
    """One text ready for the engine: encoder ids, the token forced first (the target language), if any, and the
    target-id sequences its translation must contain (a glossary's terms: DecodeParams.constraints) with where
    each may begin (glossary.with_glossary). An audio window (model.speech) has no ids but log-mel `features`
    (M, F), which the encoder takes instead."""

    ids: list[int]
    forced_bos: int | None
    constraints: tuple[tuple[int, ...], ...] = ()
    source_words: tuple[int, ...] = ()
    constraint_words: tuple[tuple[int, ...], ...] = ()
    glued: bytes = b""
    features: torch.Tensor | None = None

    @property
    def encoder_input(self) -> list[int] | torch.Tensor:
        """What BatchDecoder's entries take for this source."""
        return self.ids if self.features is None else self.features

    def decode_params(self, params: DecodeParams) -> DecodeParams:
        """`params` for decoding this source: its forced first token and its constraints."""
        return replace(params, forced_bos_token_id=self.forced_bos, constraints=self.constraints,
                       source_words=self.source_words, constraint_words=self.constraint_words, glued=self.glued)
