"""Language codes: map what a user sends to one of a model's own codes.

A model's codes: NLLB-200 `fra_Latn`, mBART-50 `fr_XX`, M2M100 `fr`, Marian `fr`, `fra`, `zho_Hans` (`>>fra<<`).
A user may send those, their tokens (`>>fra<<`, `__fr__`), ISO 639-1/639-2/639-3 codes (`fr`, `fre`, `fra`) or
BCP 47 tags (`zh-Hant`, `pt-BR`), in any case. Best first: the code itself (exactly, then ignoring case and -/_);
else the same language as langcodes' CLDR data normalizes it (`fre` = `fr`, a macrolanguage and its dominant
member: `ar` = `arb`, `zh` = `cmn`), a script (given, or implied by a region: `zh-TW` is Hant) ruling out codes
in another script, preferring the request's region, else none; the requested script, else the language's usual
one (`ar` → `arb_Arab`); the language as written (`zh` → `zho`, not `cmn`). Codes still tied that name different
tags make the request ambiguous (`zh` on NLLB: `zho_Hans` or `zho_Hant`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple, Sequence

from langcodes import Language

# Model spellings no library knows: M2M100 writes Northern Sotho "ns", no ISO code (ISO 639-3: nso); Tatoeba-MT
# (OPUS-MT tc-*) marks Brazilian Portuguese >>pob<< (ISO 639-3 pob is Poqomchi', which no such model serves).
_CODE_ALIASES = {"ns": "nso", "pob": "pt-BR"}
# CLDR language matching takes "no" (the macrolanguage) as its dominant member "nb" (distance 1, the only such
# pair), but langcodes' normalization keeps the two apart.
_SAME_LANGUAGE = {"nb": "no"}
_NO_REGION = {"XX", "ZZ"}  # mBART-50's fr_XX: fairseq's "no region"
_TOKEN = re.compile(r">>(.+)<<|__(.+)__")
_TAG = re.compile(r"([a-z]{2,3})(?:[-_]([a-z]{4}))?(?:[-_]([a-z]{2}|[0-9]{3}))?")  # language[-script][-region]


class UnsupportedLanguage(ValueError):
    """A requested language a model lacks (`candidates` empty), names several of its codes (`candidates`), or
    none given where the model needs one (`code` None)."""

    def __init__(self, field: str, code: str | None, supported: Sequence[str], candidates: Sequence[str] = ()):
        self.field, self.code = field, code
        self.supported, self.candidates = list(supported), list(candidates)
        if code is None:
            message = f"{field} is required by this model; supported: {', '.join(self.supported)}"
        elif self.candidates:
            message = f"{field} {code!r} is ambiguous for this model: {', '.join(self.candidates)}"
        else:
            message = (f"{field} {code!r} is not supported by this model; supported: "
                       f"{', '.join(self.supported) or 'none'} (or ISO 639-1/639-3 codes)")
        super().__init__(message)


class ConflictingTarget(UnsupportedLanguage):
    """A text names its target at its start (MADLAD's `<2pt> ...`) and target_lang names another."""

    def __init__(self, requested: str, named: str):
        ValueError.__init__(self, f"target_lang {requested!r} disagrees with the target the text names at its start "
                                  f"({named!r})")
        self.field, self.code, self.supported, self.candidates = "target_lang", requested, [named], []


class _Code(NamedTuple):
    code: str  # as the model spells it
    language: str  # macrolanguage-folded: what requests are matched on
    written: str  # the language as the code names it, normalized but not folded: "zh" for zho, "cmn" for cmn
    script: str | None  # given or implied by the region (zh_CN: Hans); None: not known
    region: str | None
    usual_script: bool  # no script given, or the language's usual one (arb_Arab, not arb_Latn)


def _unwrap(code: str) -> str:
    token = _TOKEN.fullmatch(code)
    return next(g for g in token.groups() if g) if token else code


def _loose(code: str) -> str:
    return code.casefold().replace("-", "_")


def _spelled(code: str) -> str:
    inner = _unwrap(code)
    return _CODE_ALIASES.get(inner.lower(), inner)


def _tag(code: str) -> Language | None:
    """A model's code as a language tag, None when it names no language."""
    try:
        tag = Language.get(_spelled(code))
    except ValueError:
        return None
    if tag.territory in _NO_REGION:
        tag = tag.update_dict({"territory": None})
    return tag if tag.language else None


def _folded(tag: Language) -> str:
    language = tag.prefer_macrolanguage().language
    return _SAME_LANGUAGE.get(language, language)


def iso_code(code: str) -> str | None:
    """A model code's ISO 639-1 code if the language has one, else its ISO 639-3 code, or the 639-1 code of the
    macrolanguage CLDR folds it into (fra_Latn, fr_XX → fr; twi_Latn → tw; arb_Arab → ar; zho_Hant → zh;
    prs_Arab → prs); None when unknown."""
    tag = _tag(code)
    if tag is None or not tag.is_valid():
        return None
    if tag.territory and not (as_written := Language.get(_spelled(code), normalize=False)).territory:
        return as_written.language.lower()  # CLDR makes prs (Dari) fa-AF: keep prs
    return tag.language if len(tag.language) == 2 else tag.prefer_macrolanguage().language


class LanguageIndex:
    """A model's codes, indexed so that matching a request costs microseconds."""

    def __init__(self, codes: Sequence[str]):
        self.codes = tuple(codes)
        self._exact: dict[str, str] = {}
        self._loose: dict[str, str] = {}
        self._by_language: dict[str, list[_Code]] = {}
        for code in self.codes:
            self._exact.setdefault(_unwrap(code), code)
            self._loose.setdefault(_loose(_unwrap(code)), code)  # pt_br, pt_BR: one tag, the first wins
            if (tag := _tag(code)) is not None:
                script = tag.script or (tag.maximize().script if tag.territory else None)
                usual = tag.prefer_macrolanguage().simplify_script().script is None  # arb_Arab is plain "ar"
                entry = _Code(code, _folded(tag), tag.language, script, tag.territory, usual)
                self._by_language.setdefault(entry.language, []).append(entry)

    def match(self, requested: str, field: str) -> str:
        """The one code that `requested` names; raises UnsupportedLanguage naming `field`."""
        found = self._find(requested)
        if isinstance(found, str):
            return found
        raise UnsupportedLanguage(field, requested, self.codes, found)

    def _find(self, requested: str) -> str | list[str]:
        text = _unwrap(requested.strip())
        if found := self._exact.get(text) or self._loose.get(_loose(text)):
            return found
        parts = _TAG.fullmatch(text.lower())
        if parts is None:
            return []
        language, script, region = parts.groups()
        # Only bounded pieces of a request reach langcodes, which caches every tag it parses, forever.
        base = Language.get(language)
        if not base.language or not (entries := self._by_language.get(_folded(base))):
            return []
        script = script.title() if script else base.script
        region = region.upper() if region else base.territory
        region = None if region in _NO_REGION else region
        if script is None and region and Language.make(territory=region).is_valid():
            script = Language.make(language=base.language, territory=region).maximize().script
        return _choose(entries, base.language, script, region)


def _choose(entries: list[_Code], written: str, script: str | None, region: str | None) -> str | list[str]:
    candidates = [e for e in entries if script is None or e.script in (None, script)]
    preferences = (lambda e: e.region == region, lambda e: e.region is None,
                   (lambda e: e.script == script) if script else (lambda e: e.usual_script),
                   lambda e: e.written == written)
    for preferred in preferences:
        candidates = [e for e in candidates if preferred(e)] or candidates
    if len({(e.written, e.script, e.region) for e in candidates}) == 1:
        return candidates[0].code  # several spellings of one tag (ara, ar): the first listed
    return [e.code for e in candidates]


@lru_cache(maxsize=64)
def language_index(codes: tuple[str, ...]) -> LanguageIndex:
    """The index of `codes`, built once per distinct list."""
    return LanguageIndex(codes)


def match_language(requested: str, codes: Sequence[str], field: str) -> str:
    """The one code of `codes` (a model's own codes) that `requested` names; raises UnsupportedLanguage."""
    return language_index(tuple(codes)).match(requested, field)
