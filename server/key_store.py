"""The key store: API keys with their own limits, and every caller's usage, in one SQLite file that every process
of a machine shares (workers, Ray Serve replicas of one node), so counts are exact across them and survive restarts.

Keys are stored as their SHA-256 (a key is shown once, when it is made); each has a name, its first characters to
recognize it by, and its own requests per minute and character quota (NULL: the server's defaults). A caller is a
key's hash, or `address:<ip>` on a server without keys. Requests are counted per clock minute (`minutes`, which
every process reads the same), characters and requests in all per caller (`usage`). Each check is one statement,
atomic under SQLite's write lock: a limit of N per minute admits N requests whichever process receives them.

A file that is not a database, or one this process may not write, is a StoreError at start, never a fresh store.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .sqlite_file import Transaction, one_at_a_time, open_file
from .stores import LocalStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,                -- sha256 of the key, hex
    name TEXT NOT NULL,
    hint TEXT NOT NULL,                 -- the key's first characters (at most a third of it)
    rate_limit_per_minute INTEGER,      -- NULL: the server's default; 0: none
    character_quota INTEGER,            -- NULL: the server's default; 0: none
    from_env INTEGER NOT NULL DEFAULT 0,  -- a key of SERVER_API_KEYS: active while it is listed there
    active INTEGER NOT NULL DEFAULT 1,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS usage (
    caller TEXT PRIMARY KEY,
    characters INTEGER NOT NULL DEFAULT 0,
    requests INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS minutes (
    caller TEXT NOT NULL,
    minute INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    PRIMARY KEY (caller, minute)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class KeyRecord:
    id: str
    name: str
    hint: str
    rate_limit_per_minute: int | None
    character_quota: int | None
    from_env: bool
    active: bool


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "s2s-" + secrets.token_urlsafe(24)


class KeyStore(LocalStore):
    """One process's connection to the store file (created with its folder on first use)."""

    def __init__(self, path: str | Path):
        self.path, self.lock = Path(path), threading.RLock()
        self.db = open_file(self.path, SCHEMA, "UPDATE keys SET active = active WHERE id = ''", "key store")

    def transaction(self):
        return Transaction(self.db)

    # ---- keys --------------------------------------------------------------------------------------------
    @one_at_a_time
    def add(self, name: str, key: str | None = None, rate_limit_per_minute: int | None = None,
            character_quota: int | None = None, from_env: bool = False) -> str:
        key = key or new_key()
        with self.transaction():
            self._insert(name, key, rate_limit_per_minute, character_quota, from_env)
        return key

    def _insert(self, name: str, key: str, rate_limit_per_minute: int | None, character_quota: int | None,
                from_env: bool) -> None:
        hint = key[:min(10, len(key) // 3)]
        self.db.execute("INSERT INTO keys (id, name, hint, rate_limit_per_minute, character_quota, from_env, created) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET active = 1",
                        (key_id(key), name, hint, rate_limit_per_minute, character_quota, int(from_env),
                         int(time.time())))

    @one_at_a_time
    def sync_env(self, keys: tuple[str, ...]) -> None:
        """SERVER_API_KEYS' keys stored like the others (the server's defaults, their usage kept); one that is no
        longer listed there is inactive (its usage kept, should it come back)."""
        ids = [key_id(k) for k in keys]
        with self.transaction():
            self.db.execute(f"UPDATE keys SET active = 0 WHERE from_env = 1 AND id NOT IN "
                            f"({','.join('?' * len(ids))})", ids)
            for key in keys:
                self._insert("SERVER_API_KEYS", key, None, None, from_env=True)

    @one_at_a_time
    def remove(self, name_or_hint: str) -> int:
        with self.transaction():
            return self.db.execute("DELETE FROM keys WHERE name = ? OR hint = ?", (name_or_hint, name_or_hint)).rowcount

    @one_at_a_time
    def keys(self) -> list[KeyRecord]:
        rows = self.db.execute("SELECT id, name, hint, rate_limit_per_minute, character_quota, from_env, active "
                               "FROM keys ORDER BY rowid").fetchall()
        return [KeyRecord(*row[:5], bool(row[5]), bool(row[6])) for row in rows]

    @one_at_a_time
    def active(self) -> dict[str, KeyRecord]:
        return {record.id: record for record in self.keys() if record.active}

    # ---- counts ------------------------------------------------------------------------------------------
    @one_at_a_time
    def admit(self, caller: str, minute: int, limit: int) -> bool:
        """Count one request of `caller` in `minute` (and in all); False, counting nothing, when `limit` (> 0)
        requests were admitted in that minute already."""
        with self.transaction():
            if limit:
                admitted = self.db.execute(
                    "INSERT INTO minutes (caller, minute, requests) VALUES (?, ?, 1) ON CONFLICT (caller, minute) "
                    "DO UPDATE SET requests = requests + 1 WHERE requests < ? RETURNING requests",
                    (caller, minute, limit)).fetchone()
                if admitted is None:
                    return False
            self.db.execute("INSERT INTO usage (caller, requests) VALUES (?, 1) ON CONFLICT (caller) "
                            "DO UPDATE SET requests = requests + 1", (caller,))
        return True

    @one_at_a_time
    def forget_minutes_before(self, minute: int) -> None:
        with self.transaction():
            self.db.execute("DELETE FROM minutes WHERE minute < ?", (minute,))

    @one_at_a_time
    def charge(self, caller: str, characters: int, quota: int) -> int | None:
        """Add `characters` to `caller`'s count unless that goes past `quota` (> 0); the count after, or None when
        refused (nothing added)."""
        if quota and characters > quota:
            return None
        with self.transaction():  # a new row holds at most the quota; an old one grows only within it
            row = self.db.execute(
                "INSERT INTO usage (caller, characters) VALUES (?, ?) ON CONFLICT (caller) DO UPDATE SET "
                "characters = characters + excluded.characters WHERE ? = 0 OR characters + excluded.characters <= ? "
                "RETURNING characters", (caller, characters, quota, quota)).fetchone()
        return None if row is None else row[0]

    @one_at_a_time
    def refund(self, caller: str, characters: int) -> None:
        with self.transaction():
            self.db.execute("UPDATE usage SET characters = characters - ? WHERE caller = ?", (characters, caller))

    @one_at_a_time
    def usage(self, caller: str) -> tuple[int, int]:
        """(characters, requests) counted for `caller` so far."""
        row = self.db.execute("SELECT characters, requests FROM usage WHERE caller = ?", (caller,)).fetchone()
        return row or (0, 0)

    def close(self) -> None:
        self.db.close()

