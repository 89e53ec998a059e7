"""Document jobs: each uploaded file and its translation on disk, its state in one SQLite file beside them, which
every process of a machine shares (workers, Ray Serve replicas of one node), so a job submitted to one process is
run by whichever claims it first, polled and fetched through any, and outlives a restart.

A job belongs to its caller (an API key's hash, or a client address) and is found by its id and its key together
(the key is stored as its SHA-256, and shown once). States: queued → translating → done | error. A process running a
job beats its heartbeat; a job whose heartbeat stops (its process died) is claimed again and resumed from its file,
or, once it has been tried `attempts` times, ends as `error` saying so. Every statement that changes a state is one
transaction under SQLite's write lock, so two processes never claim one job.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePath

from .glossary_entries import Entries
from .sqlite_file import StoreError, Transaction, one_at_a_time, open_file
from .stores import LocalStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,                  -- sha256 of the document key, hex
    owner TEXT NOT NULL,                -- the caller who submitted it
    filename TEXT NOT NULL,             -- as uploaded
    suffix TEXT NOT NULL,               -- how the upload is read (.docx)
    output_suffix TEXT NOT NULL,        -- how the translation is written
    source_lang TEXT,                   -- NULL: detected
    target_lang TEXT NOT NULL,
    model TEXT,                         -- NULL: the model the languages resolve to
    glossary TEXT NOT NULL,             -- the (source term, target term) pairs every chunk keeps, as JSON
    status TEXT NOT NULL,               -- queued | translating | done | error
    characters INTEGER NOT NULL,        -- the file's text: what is translated and billed
    characters_done INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    error_message TEXT,
    created REAL NOT NULL,
    started REAL,                       -- when the current attempt began
    heartbeat REAL,                     -- last sign of life of the process running it
    finished REAL
);
"""


@dataclass(frozen=True)
class Job:
    id: str
    owner: str
    filename: str
    suffix: str
    output_suffix: str
    source_lang: str | None
    target_lang: str
    model: str | None
    glossary: Entries  # read from the glossary when the job was submitted: its later edits change no job
    status: str
    characters: int
    characters_done: int
    attempts: int
    error_message: str | None
    created: float
    started: float | None
    heartbeat: float | None
    finished: float | None

    @classmethod
    def from_row(cls, row) -> Job:
        fields = dict(zip(cls.__dataclass_fields__, row))
        return cls(**fields | {"glossary": tuple(map(tuple, json.loads(fields["glossary"])))})

    @property
    def download_name(self) -> str:
        return str(PurePath(self.filename).with_suffix(self.output_suffix))

    def seconds_remaining(self, now: float) -> int | None:
        """From the measured pace of this attempt: its characters done so far over the time they took; None before
        any progress (nothing measured yet)."""
        if self.status != "translating" or not self.characters_done or self.started is None:
            return None
        pace = (now - self.started) / self.characters_done
        return max(0, round(pace * (self.characters - self.characters_done)))


COLUMNS = ", ".join(Job.__dataclass_fields__)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class DocumentStore(LocalStore):
    """One process's connection to the jobs' folder (created on first use): `jobs.sqlite` and each job's files."""

    def __init__(self, folder: str | Path, clock=time.time):
        self.folder, self.clock = Path(folder).resolve(), clock  # a later change of working directory moves nothing
        self.lock = threading.RLock()
        self.db = open_file(self.folder / "jobs.sqlite", SCHEMA, "DELETE FROM jobs WHERE 0", "document store")
        columns = [row[1] for row in self.db.execute("PRAGMA table_info(jobs)")]
        if set(columns) != set(COLUMNS.split(", ")) | {"key"}:
            raise StoreError(f"document store {self.folder}: its jobs table has the columns {columns}, of another "
                             f"version (move the folder away to start an empty store)")

    def path(self, job_id: str, side: str) -> Path:
        """A job's upload (`side` "in") or translation ("out")."""
        return self.folder / f"{job_id}.{side}"

    @one_at_a_time
    def submit(self, owner: str, filename: str, suffix: str, output_suffix: str, source_lang: str | None,
               target_lang: str, model: str | None, glossary: Entries, characters: int,
               data: bytes) -> tuple[str, str]:
        """A queued job for the file `data`: its (id, key). The file is written before the row exists, so a job
        that can be claimed always has its file."""
        job_id, key = secrets.token_hex(16).upper(), secrets.token_hex(32).upper()
        self.path(job_id, "in").write_bytes(data)
        with Transaction(self.db):
            self.db.execute("INSERT INTO jobs (id, key, owner, filename, suffix, output_suffix, source_lang, "
                            "target_lang, model, glossary, status, characters, created) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
                            (job_id, _hash(key), owner, filename, suffix, output_suffix, source_lang, target_lang,
                             model, json.dumps(glossary), characters, self.clock()))
        return job_id, key

    @one_at_a_time
    def find(self, job_id: str, key: str, owner: str) -> Job | None:
        """The job with this id, key and owner; None when any of them differs (one answer for all: a wrong key
        tells nothing about the id)."""
        row = self.db.execute(f"SELECT {COLUMNS} FROM jobs WHERE id = ? AND key = ? AND owner = ?",
                              (job_id, _hash(key), owner)).fetchone()
        return Job.from_row(row) if row else None

    @one_at_a_time
    def claim(self, stale_s: float, attempts: int) -> Job | None:
        """The oldest job waiting (queued, or translating with a heartbeat older than `stale_s`), now translating
        here; a stale one already tried `attempts` times ends as error instead."""
        now = self.clock()
        with Transaction(self.db):
            self.db.execute("UPDATE jobs SET status = 'error', finished = ?, error_message = 'the server running "
                            "this document stopped ' || attempts || ' times while translating it' "
                            "WHERE status = 'translating' AND heartbeat < ? AND attempts >= ?",
                            (now, now - stale_s, attempts))
            row = self.db.execute(
                f"UPDATE jobs SET status = 'translating', attempts = attempts + 1, started = ?, heartbeat = ?, "
                f"characters_done = 0 WHERE id = (SELECT id FROM jobs WHERE status = 'queued' OR "
                f"(status = 'translating' AND heartbeat < ?) ORDER BY created LIMIT 1) RETURNING {COLUMNS}",
                (now, now, now - stale_s)).fetchone()
        return Job.from_row(row) if row else None

    @one_at_a_time
    def upload(self, job_id: str) -> bytes:
        return self.path(job_id, "in").read_bytes()

    @one_at_a_time
    def progress(self, job_id: str, characters_done: int) -> None:
        self.db.execute("UPDATE jobs SET characters_done = ?, heartbeat = ? WHERE id = ? AND status = 'translating'",
                        (characters_done, self.clock(), job_id))

    @one_at_a_time
    def count(self, job_id: str, characters: int) -> None:
        """A running job's characters, where they are known only once it runs (an audio job's, once transcribed)."""
        self.db.execute("UPDATE jobs SET characters = ? WHERE id = ? AND status = 'translating'", (characters, job_id))

    @one_at_a_time
    def finish(self, job_id: str, translated: bytes) -> None:
        """The job done: its translation written, its upload dropped."""
        self.path(job_id, "out").write_bytes(translated)
        self.db.execute("UPDATE jobs SET status = 'done', characters_done = characters, finished = ? WHERE id = ?",
                        (self.clock(), job_id))
        self.path(job_id, "in").unlink(missing_ok=True)

    @one_at_a_time
    def fail(self, job_id: str, message: str) -> None:
        self.db.execute("UPDATE jobs SET status = 'error', error_message = ?, finished = ? WHERE id = ?",
                        (message, self.clock(), job_id))
        self.path(job_id, "in").unlink(missing_ok=True)

    @one_at_a_time
    def release(self, job_id: str) -> None:
        """A job this process stops running (it shuts down) queued again for another to take at once."""
        self.db.execute("UPDATE jobs SET status = 'queued', attempts = attempts - 1, characters_done = 0 "
                        "WHERE id = ? AND status = 'translating'", (job_id,))

    @one_at_a_time
    def take(self, job: Job) -> bytes | None:
        """A done job's translation, the job deleted with it (as DeepL deletes a document once downloaded); None
        when another request took it first."""
        out = self.path(job.id, "out")
        with Transaction(self.db):
            if not self.db.execute("DELETE FROM jobs WHERE id = ? AND status = 'done'", (job.id,)).rowcount:
                return None
            try:
                data = out.read_bytes()
            except FileNotFoundError:  # removed from the folder by hand: the job goes, with nothing to give
                return None
        out.unlink(missing_ok=True)
        return data

    @one_at_a_time
    def expire(self, ttl_s: float) -> int:
        """Jobs finished more than `ttl_s` ago and never fetched, deleted with their files; how many."""
        with Transaction(self.db):
            ids = [row[0] for row in self.db.execute("DELETE FROM jobs WHERE finished < ? RETURNING id",
                                                     (self.clock() - ttl_s,))]
        for job_id in ids:
            for side in ("in", "out"):
                self.path(job_id, side).unlink(missing_ok=True)
        return len(ids)

    def close(self) -> None:
        self.db.close()

