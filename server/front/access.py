"""API keys, per-key request rate limits and character quotas, shared by every API (native, LibreTranslate, DeepL,
OpenAI), over the key store (server.key_store): the SQLite file every process of a machine shares.

A caller is its key (its hash) when the store held active keys at start (SERVER_API_KEYS' among them), else its
client address. A key's own limits apply where it has them, the server's settings (rate_limit_per_minute,
character_quota) where it has not. The keys are read from the store again every KEYS_FRESH_S, so a key added or
removed with `python -m server.keys` takes effect within that; the counts are the store's, exact across processes.
The count calls are awaited (server.stores): in a thread on this machine's file, or over the network from a replica
off a Ray cluster's head node (runtime.head_store), and the event loop serves others meanwhile. Each API reads the
key its own way and renders these errors in its own shape.
"""

from __future__ import annotations

import math
import time
from contextlib import asynccontextmanager
from typing import Callable, Iterable

from ..errors import ServerError
from ..key_store import KeyRecord, KeyStore, key_id
from ..settings import Settings
from ..stores import Store

WINDOW_S = 60  # requests are counted per clock minute, which every process reads alike
KEYS_FRESH_S = 2.0  # how long a process trusts its copy of the keys


class RateLimited(ServerError):
    status, code = 429, "rate_limited"

    def __init__(self, limit: int, retry_after_s: int):
        super().__init__(f"Slowdown: {limit} per 1 minute", limit=limit)  # LibreTranslate's wording
        self.retry_after_s = retry_after_s


class QuotaExceeded(ServerError):
    status, code = 403, "quota_exceeded"


def characters(texts: Iterable[str]) -> int:
    """What a request of texts is charged against a character quota (a file is charged the characters of its text)."""
    return sum(map(len, texts))


class Keys:
    """Who may call, how often (requests per clock minute), and how many characters in all."""

    def __init__(self, settings: Settings, store: Store[KeyStore], clock: Callable[[], float] = time.time):
        self.per_minute, self.quota = settings.rate_limit_per_minute, settings.character_quota
        self.store, self.clock = store, clock
        store.now(KeyStore.sync_env, settings.api_keys)
        self.keys: dict[str, KeyRecord] = store.now(KeyStore.active)
        self.keys_read, self.minute = clock(), int(clock() // WINDOW_S)
        self.required = bool(self.keys)  # fixed at start: the first key added to an open server needs a restart

    def caller(self, key: str | None, address: str | None) -> str | None:
        """The caller's identity: the key's hash when keys are required (None: missing or not an active key),
        else the client address (any key, or none, is accepted)."""
        if not self.required:
            return f"address:{address or 'unknown'}"
        if self.clock() - self.keys_read > KEYS_FRESH_S:
            self.keys, self.keys_read = self.store.now(KeyStore.active), self.clock()
        found = key and key_id(key)
        return found if found in self.keys else None

    def limits(self, caller: str) -> tuple[int, int]:
        """(requests per minute, character quota) of `caller`: its key's own, else the server's; 0 = none."""
        record = self.keys.get(caller)
        per_minute = record and record.rate_limit_per_minute
        quota = record and record.character_quota
        return (self.per_minute if per_minute is None else per_minute), (self.quota if quota is None else quota)

    async def admit(self, caller: str) -> None:
        """Count one request of `caller`; RateLimited (with the seconds to the next minute) over its limit."""
        if not self.enforcing:
            return
        now = self.clock()
        minute, limit = int(now // WINDOW_S), self.limits(caller)[0]
        if minute != self.minute:  # once a minute per process: earlier minutes are of no more use
            self.minute = minute
            await self.store.run(KeyStore.forget_minutes_before, minute - 1)
        if not await self.store.run(KeyStore.admit, caller, minute, limit):
            raise RateLimited(limit, max(1, math.ceil((minute + 1) * WINDOW_S - now)))

    @property
    def enforcing(self) -> bool:
        """Whether anything is checked per request (keys, a rate limit or a quota)."""
        return bool(self.required or self.per_minute or self.quota)

    @property
    def counting(self) -> bool:
        """Whether characters are counted (keys or a quota): an open, unlimited server counts none."""
        return bool(self.required or self.quota)

    @asynccontextmanager
    async def spending(self, caller: str, characters: int):
        """Charge `characters` to `caller` for the work inside; refunded if the work fails. QuotaExceeded before
        any work when the charge would go past the quota."""
        if not self.counting:  # open and unlimited: no count to keep, one per client address
            yield
            return
        quota = self.limits(caller)[1]
        if await self.store.run(KeyStore.charge, caller, characters, quota) is None:
            used = (await self.store.run(KeyStore.usage, caller))[0]
            raise QuotaExceeded(f"character quota exceeded: {used} of {quota} used, this request has "
                                f"{characters}", limit=quota)
        try:
            yield
        except BaseException:
            await self.store.run(KeyStore.refund, caller, characters)
            raise

    async def usage(self, caller: str) -> tuple[int, int | None]:
        """(characters used, the quota or None)."""
        return (await self.store.run(KeyStore.usage, caller))[0], self.limits(caller)[1] or None
