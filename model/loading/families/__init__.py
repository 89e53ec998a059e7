"""One module per family; config.json's model_type picks it."""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointError
from . import bart, m2m100, marian, mbart, t5, whisper
from .base import Family, Languages, Tokenizer

FAMILIES: dict[str, Family] = {f.name: f for f in (marian.FAMILY, m2m100.FAMILY, mbart.FAMILY, bart.FAMILY,
                                                    t5.FAMILY, t5.MT5, whisper.FAMILY)}


def family_for(model_type: str | None, config_path: Path) -> Family:
    family = FAMILIES.get(model_type or "")
    if family is None:
        raise CheckpointError(f"{config_path}: model_type {model_type!r} is not supported; supported: "
                              f"{', '.join(sorted(FAMILIES))}")
    return family


__all__ = ["FAMILIES", "Family", "Languages", "Tokenizer", "family_for"]
