"""Glossary entries: (source term, target term) pairs, read from DeepL's formats (TSV: `source<TAB>target` a line;
CSV: `source,target[,source_lang,target_lang]` a row) or from a mapping, and checked as DeepL and its client check
them: no empty term, no control character (C0, C1, U+2028, U+2029), no source term twice; within the server's
limits of UTF-8 bytes a term and a glossary. Terms are kept stripped of surrounding spaces, as the client sends them.
Pure Python: every API reads entries through here, and the store counts a glossary's bytes with `size`."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Iterable, Mapping

from .errors import GlossaryTooLarge, InvalidGlossary, InvalidRequest, TermTooLong

Entries = tuple[tuple[str, str], ...]
FORMATS = ("tsv", "csv")
UNICODE_NEWLINES = "\u2028\u2029"


@dataclass(frozen=True)
class EntryLimits:
    term_bytes: int  # UTF-8 bytes of one term
    glossary_bytes: int  # UTF-8 bytes of a glossary's entries as TSV, every dictionary together

    @classmethod
    def of(cls, settings) -> "EntryLimits":
        return cls(settings.max_glossary_term_bytes, settings.max_glossary_bytes)


def to_tsv(entries: Entries) -> str:
    return "\n".join(f"{source}\t{target}" for source, target in entries)


def size(entries: Entries) -> int:
    """What a dictionary counts against max_glossary_bytes."""
    return len(to_tsv(entries).encode())


def _unusable(text: str) -> str | None:
    """What makes a term (or a name) unusable: a control character, or half a UTF-16 pair (JSON's "\\ud800"),
    which no UTF-8 text holds."""
    if any(ord(c) < 32 or 128 <= ord(c) < 160 or c in UNICODE_NEWLINES for c in text):
        return "a control character"
    if any(0xD800 <= ord(c) < 0xE000 for c in text):
        return "a lone surrogate"
    return None


def checked_name(name: str) -> str:
    """A glossary's name: text without control characters."""
    if (problem := _unusable(name)) is not None:
        raise InvalidGlossary("name", f"the name contains {problem}")
    return name


def checked(pairs: Iterable[tuple[str, str]], field: str, limits: EntryLimits) -> Entries:
    """`pairs` stripped and checked; InvalidGlossary, TermTooLong or GlossaryTooLarge naming `field` otherwise."""
    entries: dict[str, str] = {}
    for number, pair in enumerate(pairs, 1):
        source, target = (term.strip() for term in pair)
        for term in (source, target):
            if not term:
                raise InvalidGlossary(field, f"entry {number} has an empty term")
            if (problem := _unusable(term)) is not None:
                raise InvalidGlossary(field, f"entry {number}: the term {term!r} contains {problem}")
            if len(term.encode()) > limits.term_bytes:
                raise TermTooLong(field, term, len(term.encode()), limits.term_bytes)
        if source in entries:
            raise InvalidGlossary(field, f'entry {number} duplicates the source term "{source}"')
        entries[source] = target
    if not entries:
        raise InvalidGlossary(field, "the glossary has no entries")
    found = tuple(entries.items())
    if size(found) > limits.glossary_bytes:
        raise GlossaryTooLarge(field, size(found), limits.glossary_bytes)
    return found


def _tsv_pairs(text: str, field: str) -> Iterable[tuple[str, str]]:
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        source, tab, target = line.partition("\t")
        if not tab:
            raise InvalidGlossary(field, f"entry {number} has no tab between its source and target terms")
        if "\t" in target:
            raise InvalidGlossary(field, f"entry {number} has more than one tab")
        yield source, target


def _csv_pairs(text: str, field: str) -> Iterable[tuple[str, str]]:
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise InvalidGlossary(field, f"not valid CSV: {e}") from None
    for number, row in enumerate(rows, 1):
        if not row:
            continue
        if len(row) not in (2, 4):  # source, target[, source_lang, target_lang]
            raise InvalidGlossary(field, f"entry {number} has {len(row)} columns; 2 or 4 expected")
        yield row[0], row[1]


def read(text: str, entries_format: str, field: str, limits: EntryLimits) -> Entries:
    """Entries sent as text in DeepL's `entries_format` ("tsv" or "csv")."""
    if entries_format not in FORMATS:
        raise InvalidRequest(f"Unsupported entry format specified: {entries_format!r} (tsv or csv)",
                             field="entries_format")
    return checked((_tsv_pairs if entries_format == "tsv" else _csv_pairs)(text, field), field, limits)


def from_mapping(mapping: Mapping[str, str], field: str, limits: EntryLimits) -> Entries:
    """Entries sent as {"source term": "target term"} (the native API)."""
    return checked(mapping.items(), field, limits)
