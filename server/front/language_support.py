"""Whether a model serves a language: the one rule the registry, dispatch and every API's language checks ask."""

from __future__ import annotations

from typing import Sequence

from model import UnsupportedLanguage, match_language


def serves(codes: Sequence[str], requested: str, side: str) -> bool:
    """Whether a model whose `side` ("source" or "target") languages are `codes` (its own) takes `requested` (its
    own code, ISO 639-1/639-3 or BCP-47, as model.match_language matches them). A model that declares no source
    languages takes any source."""
    if side == "source" and not codes:
        return True
    try:
        match_language(requested, codes, f"{side}_lang")
    except UnsupportedLanguage:
        return False
    return True
