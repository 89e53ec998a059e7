"""Language detection with py3langid (its model ships in the wheel), restricted to the languages a caller can use.

    detect_language("Guten Tag, wie geht es?", ["eng_Latn", "deu_Latn", "fr"])   # [("de", 0.99), ("en", ...), ...]

Candidates may be any codes a model uses (`eng_Latn`, `de`, `pt_XX`, `>>fra<<`) or ISO 639 codes; they are mapped
to ISO 639 with `iso_code` and kept when py3langid knows the language. One identifier is built per candidate set
(restricting one shared identifier would race between threads) and cached; the model file is read once.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Iterable

from py3langid.langid import MODEL_FILE, LanguageIdentifier

from .languages import iso_code

SAMPLE_CHARS = 2_000  # detection reads the start of a text: enough for a confident guess, bounded cost
_lock = threading.Lock()


@lru_cache(maxsize=1)
def _full_model() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages() -> frozenset[str]:
    """The ISO 639 codes py3langid can tell apart ("zxx", no linguistic content, left out)."""
    return frozenset(_full_model().labels) - {"zxx"}


def detectable(codes: Iterable[str]) -> tuple[str, ...]:
    """The distinct ISO 639 codes of `codes` that py3langid knows, sorted."""
    known = known_languages()
    return tuple(sorted({iso for iso in map(iso_code, codes) if iso in known}))


@lru_cache(maxsize=256)
def _identifier(languages: tuple[str, ...]) -> LanguageIdentifier:
    with _lock:
        full = _full_model()
        identifier = LanguageIdentifier(full.nb_ptc, full.nb_pc, full.nb_classes, full.tk_nextmove, full.tk_output,
                                        norm_probs=True, tk_row=full.tk_row)
        identifier.set_languages(languages)  # slices copies of the tables: the shared model stays whole
        return identifier


def detect_language(text: str, candidates: Iterable[str]) -> list[tuple[str, float]]:
    """Candidate languages ranked for `text`: (ISO 639 code, confidence 0..1), best first. One candidate is
    certain (1.0); no candidate py3langid knows gives []."""
    languages = detectable(candidates)
    if len(languages) <= 1:
        return [(language, 1.0) for language in languages]
    return [(language, float(p)) for language, p in _identifier(languages).rank(text[:SAMPLE_CHARS])]
