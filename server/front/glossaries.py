"""Glossaries as every API uses them (DeepL's v2 and v3, the native /v1): whose a glossary is, the store's answers
(server.stores: a file, or the head node's on a Ray cluster, awaited either way), the language pairs the served models
translate, and the entries a translation job keeps.

A glossary belongs to the caller's key when the server has keys, else to everyone ("", one namespace). Languages are
kept as DeepL keeps them: without region, lower case (`EN-GB` is `en`), so an EN glossary serves EN-GB and EN-US.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Sequence

from model import iso_code

from ..errors import GlossaryNeedsLanguage, GlossaryNotFound, InvalidRequest
from ..glossary_entries import Entries, EntryLimits, checked_name
from ..glossary_store import StoredGlossary, GlossaryStore, NewDictionary
from ..settings import Settings
from ..stores import Store
from .access import Keys
from .dispatch import is_auto
from .provider import ModelProvider
from .served_languages import ServedLanguages, canonical

UNSUPPORTED_PAIR = "Unsupported glossary source and target language pair"  # DeepL's words


@lru_cache(maxsize=1024)
def base_language(code: str) -> str:
    """A language code as glossaries keep it, ISO 639-1 where there is one: `EN-GB` → `en`, `zh-Hans` → `zh`, and a
    model's own code too (`fra_Latn` → `fr`), so a /v1 request in NLLB's codes finds an `fr` dictionary."""
    return iso_code(canonical(code)) or code.strip().lower()


def creation_time(created: float) -> str:
    """ISO 8601 in UTC with milliseconds, as DeepL writes it (its client requires the fractional seconds)."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def language_pairs(provider: ModelProvider) -> list[tuple[str, str]]:
    """The (source, target) pairs some served model translates, as glossaries name languages."""
    languages = ServedLanguages.of(provider)
    pairs = ((base_language(source), base_language(target)) for source in languages.sources
             for target in languages.targets_of(source))
    return list(dict.fromkeys(pair for pair in pairs if pair[0] != pair[1]))


@dataclass(frozen=True)
class Glossaries:
    store: Store[GlossaryStore]
    settings: Settings
    keys: Keys

    @property
    def limits(self) -> EntryLimits:
        return EntryLimits.of(self.settings)

    def owner(self, caller: str | None) -> str:
        """Whose glossaries a caller sees: its key's where the server has keys, else everyone's."""
        return (caller or "") if self.keys.required else ""

    def dictionary(self, provider: ModelProvider, source_lang: str, target_lang: str, entries: Entries,
                   field: str = "source_lang") -> NewDictionary:
        """A dictionary for a pair some served model translates (InvalidRequest UNSUPPORTED_PAIR naming `field` if
        none does)."""
        pair = base_language(source_lang), base_language(target_lang)
        if pair not in language_pairs(provider):
            raise InvalidRequest(UNSUPPORTED_PAIR, field=field)
        return NewDictionary(*pair, entries)

    async def create(self, owner: str, name: str, dictionaries: list[NewDictionary]) -> StoredGlossary:
        pairs = [(d.source_lang, d.target_lang) for d in dictionaries]
        if len(set(pairs)) < len(pairs):
            raise InvalidRequest("dictionaries: one dictionary per language pair", field="dictionaries")
        return await self.store.run(GlossaryStore.create, owner, checked_name(name), dictionaries,
                                    self.settings.max_glossaries, self.settings.max_glossary_bytes)

    async def glossaries(self, owner: str) -> list[StoredGlossary]:
        return await self.store.run(GlossaryStore.glossaries, owner)

    async def get(self, owner: str, glossary_id: str) -> StoredGlossary:
        return _found(await self.store.run(GlossaryStore.get, owner, glossary_id))

    async def entries(self, owner: str, glossary_id: str, source_lang: str, target_lang: str) -> Entries:
        """A dictionary's entries; GlossaryNotFound when the glossary or that dictionary is not there."""
        return _found(await self.store.run(GlossaryStore.entries, owner, glossary_id, base_language(source_lang),
                                           base_language(target_lang)))

    async def update(self, owner: str, glossary_id: str, name: str | None = None,
                     merged: Sequence[NewDictionary] = (), replaced: Sequence[NewDictionary] = ()) -> StoredGlossary:
        name = name if name is None else checked_name(name)
        return _found(await self.store.run(GlossaryStore.update, owner, glossary_id, name, list(merged),
                                           list(replaced), self.settings.max_glossary_bytes))

    async def delete(self, owner: str, glossary_id: str) -> None:
        _found(await self.store.run(GlossaryStore.delete, owner, glossary_id) or None)

    async def delete_dictionary(self, owner: str, glossary_id: str, source_lang: str, target_lang: str) -> None:
        deleted = await self.store.run(GlossaryStore.delete_dictionary, owner, glossary_id,
                                       base_language(source_lang), base_language(target_lang))
        _found(deleted or None)

    async def terms(self, owner: str, glossary_id: str, source_lang: str, target_lang: str) -> Entries:
        """The entries a job translating `source_lang` into `target_lang` keeps: the glossary's dictionary for that
        pair (404 when the glossary is not the caller's; 400 naming glossary_id when it has no such dictionary). Both
        languages are required, neither "auto": they pick the dictionary (GlossaryNeedsLanguage)."""
        for knob, code in (("source_lang", source_lang), ("target_lang", target_lang)):
            if not code or is_auto(code):
                raise GlossaryNeedsLanguage(knob)
        glossary = await self.get(owner, glossary_id)
        source, target = base_language(source_lang), base_language(target_lang)
        if not any((d.source_lang, d.target_lang) == (source, target) for d in glossary.dictionaries):
            raise InvalidRequest(f"The glossary has no dictionary from {source} to {target} (its language pairs must "
                                 f"match source_lang and target_lang)", field="glossary_id")
        return await self.entries(owner, glossary_id, source, target)

    async def merged_terms(self, owner: str, glossary_ids: Sequence[str], source_lang: str,
                           target_lang: str) -> Entries:
        """The entries of several glossaries for one language pair (terms() of each), the first glossary's target
        where two hold the same source term."""
        merged: dict[str, str] = {}
        for glossary_id in glossary_ids:
            for source, target in await self.terms(owner, glossary_id, source_lang, target_lang):
                merged.setdefault(source, target)
        return tuple(merged.items())


def _found(answer):
    if answer is None:
        raise GlossaryNotFound()
    return answer
