"""The glossary store: every glossary in the SQLite file of the key store (server.key_store), so every worker, Ray
Serve replica and node (through the head node: runtime.head_store) sees the same ones, and a restart keeps them.

One model for DeepL's v2 glossaries (one dictionary) and v3 multilingual ones (a dictionary per language pair): a
glossary is an id, its owner, a name and its creation time; a dictionary its (source_lang, target_lang) and its entries
as TSV (terms never hold a tab or a line break: glossary_entries checks them). Every call names the owner (an API
key's hash; "" on a server without keys), and a glossary of another owner is not found: it cannot be seen, used or
deleted. The number of glossaries per owner and a glossary's bytes are checked inside the write's transaction, so
two processes creating at once cannot pass a limit together.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import GlossaryTooLarge, TooManyGlossaries
from .glossary_entries import Entries, size, to_tsv
from .sqlite_file import Transaction, one_at_a_time, open_file
from .stores import LocalStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS glossaries (
    id TEXT PRIMARY KEY,                -- a UUID, as DeepL's
    owner TEXT NOT NULL,                -- the key's hash (key_store.key_id); '' on a server without keys
    name TEXT NOT NULL,
    created REAL NOT NULL               -- Unix seconds
);
CREATE INDEX IF NOT EXISTS glossaries_by_owner ON glossaries (owner, created);
CREATE TABLE IF NOT EXISTS dictionaries (
    glossary TEXT NOT NULL REFERENCES glossaries (id) ON DELETE CASCADE,
    source_lang TEXT NOT NULL,          -- a language without region, lower case: en, pt, zh
    target_lang TEXT NOT NULL,
    entries TEXT NOT NULL,              -- TSV
    entry_count INTEGER NOT NULL,
    bytes INTEGER NOT NULL,             -- of the TSV, UTF-8: what max_glossary_bytes counts
    PRIMARY KEY (glossary, source_lang, target_lang)
);
"""


@dataclass(frozen=True)
class Dictionary:
    source_lang: str
    target_lang: str
    entry_count: int


@dataclass(frozen=True)
class StoredGlossary:
    id: str
    name: str
    created: float  # Unix seconds
    dictionaries: tuple[Dictionary, ...]


@dataclass(frozen=True)
class NewDictionary:
    source_lang: str
    target_lang: str
    entries: Entries


def _entries(tsv: str) -> Entries:
    return tuple(tuple(line.split("\t", 1)) for line in tsv.split("\n") if line)


class GlossaryStore(LocalStore):
    """One process's connection to the store file."""

    def __init__(self, path: str | Path):
        self.path, self.lock = Path(path), threading.RLock()
        self.db = open_file(self.path, SCHEMA, "UPDATE glossaries SET name = name WHERE id = ''", "glossary store")
        self.db.execute("PRAGMA foreign_keys=ON")

    @one_at_a_time
    def create(self, owner: str, name: str, dictionaries: list[NewDictionary], max_glossaries: int,
               max_bytes: int) -> StoredGlossary:
        """A new glossary; TooManyGlossaries when `owner` has `max_glossaries` already."""
        glossary_id, created = str(uuid.uuid4()), time.time()
        with Transaction(self.db):
            count = self.db.execute("SELECT COUNT(*) FROM glossaries WHERE owner = ?", (owner,)).fetchone()[0]
            if count >= max_glossaries:
                raise TooManyGlossaries(max_glossaries)
            self.db.execute("INSERT INTO glossaries (id, owner, name, created) VALUES (?, ?, ?, ?)",
                            (glossary_id, owner, name, created))
            for dictionary in dictionaries:
                self._write(glossary_id, dictionary)
            self._check_bytes(glossary_id, max_bytes)
        return self.get(owner, glossary_id)

    @one_at_a_time
    def glossaries(self, owner: str) -> list[StoredGlossary]:
        """`owner`'s glossaries, oldest first."""
        rows = self.db.execute("SELECT id FROM glossaries WHERE owner = ? ORDER BY created", (owner,)).fetchall()
        return [glossary for (glossary_id,) in rows if (glossary := self.get(owner, glossary_id))]

    @one_at_a_time
    def get(self, owner: str, glossary_id: str) -> StoredGlossary | None:
        row = self.db.execute("SELECT name, created FROM glossaries WHERE id = ? AND owner = ?",
                              (glossary_id, owner)).fetchone()
        if row is None:
            return None
        dictionaries = self.db.execute("SELECT source_lang, target_lang, entry_count FROM dictionaries "
                                       "WHERE glossary = ? ORDER BY rowid", (glossary_id,)).fetchall()
        return StoredGlossary(glossary_id, row[0], row[1], tuple(Dictionary(*d) for d in dictionaries))

    @one_at_a_time
    def entries(self, owner: str, glossary_id: str, source_lang: str, target_lang: str) -> Entries | None:
        """A dictionary's entries, in the order they were given; None when there is no such dictionary."""
        row = self.db.execute(
            "SELECT d.entries FROM dictionaries d JOIN glossaries g ON g.id = d.glossary WHERE g.id = ? AND "
            "g.owner = ? AND d.source_lang = ? AND d.target_lang = ?",
            (glossary_id, owner, source_lang, target_lang)).fetchone()
        return None if row is None else _entries(row[0])

    @one_at_a_time
    def update(self, owner: str, glossary_id: str, name: str | None, merged: list[NewDictionary],
               replaced: list[NewDictionary], max_bytes: int) -> StoredGlossary | None:
        """Rename (`name`), merge entries into dictionaries (a source term given replaces its target; a new one is
        added; a new language pair is a new dictionary) and replace whole dictionaries; None when not found."""
        with Transaction(self.db):
            if not self._owns(owner, glossary_id):
                return None
            if name is not None:
                self.db.execute("UPDATE glossaries SET name = ? WHERE id = ?", (name, glossary_id))
            for dictionary in merged:
                old = self.entries(owner, glossary_id, dictionary.source_lang, dictionary.target_lang) or ()
                combined = tuple({**dict(old), **dict(dictionary.entries)}.items())
                self._write(glossary_id, NewDictionary(dictionary.source_lang, dictionary.target_lang, combined))
            for dictionary in replaced:
                self._write(glossary_id, dictionary)
            self._check_bytes(glossary_id, max_bytes)
        return self.get(owner, glossary_id)

    @one_at_a_time
    def delete(self, owner: str, glossary_id: str) -> bool:
        with Transaction(self.db):
            return self.db.execute("DELETE FROM glossaries WHERE id = ? AND owner = ?",
                                   (glossary_id, owner)).rowcount > 0

    @one_at_a_time
    def delete_dictionary(self, owner: str, glossary_id: str, source_lang: str, target_lang: str) -> bool:
        with Transaction(self.db):
            if not self._owns(owner, glossary_id):
                return False
            return self.db.execute("DELETE FROM dictionaries WHERE glossary = ? AND source_lang = ? AND "
                                   "target_lang = ?", (glossary_id, source_lang, target_lang)).rowcount > 0

    def close(self) -> None:
        self.db.close()

    def _owns(self, owner: str, glossary_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM glossaries WHERE id = ? AND owner = ?",
                               (glossary_id, owner)).fetchone() is not None

    def _write(self, glossary_id: str, dictionary: NewDictionary) -> None:
        self.db.execute(
            "INSERT INTO dictionaries (glossary, source_lang, target_lang, entries, entry_count, bytes) VALUES "
            "(?, ?, ?, ?, ?, ?) ON CONFLICT (glossary, source_lang, target_lang) DO UPDATE SET "
            "entries = excluded.entries, entry_count = excluded.entry_count, bytes = excluded.bytes",
            (glossary_id, dictionary.source_lang, dictionary.target_lang, to_tsv(dictionary.entries),
             len(dictionary.entries), size(dictionary.entries)))

    def _check_bytes(self, glossary_id: str, max_bytes: int) -> None:
        """Raised inside the write's transaction, so a glossary over the limit is never stored."""
        total = self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM dictionaries WHERE glossary = ?",
                                (glossary_id,)).fetchone()[0]
        if total > max_bytes:
            raise GlossaryTooLarge("entries", total, max_bytes)
