"""The SQLite files the server keeps its state in (the key store, the glossary store, the document jobs): opened the
same way, each store's methods one thread at a time, and a file that cannot serve stops the server with one line
naming it, never replaced by a fresh one."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path


class StoreError(Exception):
    """A store file cannot be used: the message names the file and what to do."""


def open_file(path: Path, schema: str, probe: str, what: str) -> sqlite3.Connection:
    """A connection to `path` (created with its folder on first use) holding `schema`'s tables, proven writable by
    `probe` (a write that changes nothing); `what` names the store in the error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash loses nothing, a power cut the last commits
        db.executescript(schema)
        with Transaction(db):  # a file this process may read but not write fails here, not at a request
            db.execute(probe)
    except (sqlite3.Error, OSError) as e:
        raise StoreError(f"{what} {path}: {e} (the file is never replaced: fix its permissions, or move it away to "
                         f"start an empty store)") from None
    return db


class Transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an error): takes the write lock at once, so a read-then-write never
    meets another process's write in between."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, error, trace):
        self.db.execute("ROLLBACK" if kind else "COMMIT")


def one_at_a_time(method):
    """A store's method under the store's lock (a threading.RLock: one method may call another): its one connection
    serves one thread at a time, so a transaction begun by one thread never meets another's statements."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return locked
