"""The languages the served models translate, named as LibreTranslate names them (ISO 639-1 where there is one;
`zh-Hans`, `zh-Hant`, `pt-BR` where the script or region matters), and matching of the codes clients send.

Requested codes are matched against each model's own codes by `model.match_language` (case-insensitive; BCP-47
tags such as `EN-GB`, `PT-BR` or `ZH-HANS` reach the model's `en`, `pt`, `zho_Hans`), after the aliases below.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from langcodes import Language

from ..domain import LanguageInfo, ModelInfo
from ..errors import LanguageNotServed
from .language_support import serves
from .provider import ModelProvider

# LibreTranslate's older codes (zh was Simplified Chinese, zt Traditional, pb Brazilian Portuguese); DeepL's ZH is
# Simplified Chinese too. Without the alias, `zh` is ambiguous on a model with both scripts.
CODE_ALIASES = {"zh": "zh-Hans", "zt": "zh-Hant", "pb": "pt-BR"}


def canonical(requested: str) -> str:
    code = requested.strip()
    return CODE_ALIASES.get(code.lower(), code)


def public_code(lang: LanguageInfo) -> str | None:
    """How LibreTranslate names a model's language; None when the code names no known language."""
    if lang.iso is None:
        return None
    try:
        tag = Language.get(lang.code.strip("<>_"))  # >>zho_Hant<< and __zh__ are tokens around a code
    except ValueError:
        return lang.iso
    if lang.iso == "zh":
        return f"zh-{tag.script or tag.maximize().script}"
    if lang.iso == "pt" and tag.territory == "BR":
        return "pt-BR"
    return lang.iso


def language_name(code: str) -> str:
    return Language.get(code).display_name()


@lru_cache(maxsize=64)
def _public(langs: tuple[LanguageInfo, ...]) -> tuple[str, ...]:
    """A model's languages (one side) by their public codes, computed once per model."""
    return tuple(dict.fromkeys(code for code in map(public_code, langs) if code))


@dataclass(frozen=True)
class ServedLanguages:
    models: tuple[ModelInfo, ...]

    @classmethod
    def of(cls, provider: ModelProvider) -> "ServedLanguages":
        return cls(tuple(info for info in provider.models() if not info.speech))

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(c for info in self.models for c in _public(info.source_languages)))

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(c for info in self.models for c in _public(info.target_languages)))

    def targets_of(self, source: str) -> list[str]:
        """What `source` (a public code) translates into, on any served model."""
        return list(dict.fromkeys(t for info in self.models if source in _public(info.source_languages)
                                  for t in _public(info.target_languages) if t != source))

    def supports(self, requested: str, side: str) -> bool:
        """Whether some served model has `requested` as a source (side "source") or target language."""
        code = canonical(requested)
        return any(serves(info.codes(side), code, side) for info in self.models)


def check_served(provider: ModelProvider, source: str | None, target: str | None) -> None:
    """Both languages served, the source checked first: LanguageNotServed otherwise. No source (None or empty) is
    the model's own or one detected (the caller reads "auto" as its API means it); a target is required."""
    languages = ServedLanguages.of(provider)
    for side, code in (("source", source), ("target", target)):
        if (code or side == "target") and not (code and languages.supports(code, side)):
            raise LanguageNotServed(side, code, languages.sources if side == "source" else languages.targets)
