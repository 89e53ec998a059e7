"""API keys, per-key request rate limits and character quotas, shared by every API (native, LibreTranslate, DeepL).

A caller is its API key when keys are configured, else its client address. Counts live in memory, per HTTP
process (replica or worker): with N of them a caller gets up to N times the limits, and a restart starts the counts
afresh. Each API reads the key its own way and renders these errors in its own shape.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Callable, Iterable

from ..errors import ServerError
from ..settings import Settings

WINDOW_S = 60.0


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
    """Who may call, how often (requests per fixed one-minute window), and how many characters in all."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic):
        self.keys = frozenset(settings.api_keys)
        self.per_minute, self.quota = settings.rate_limit_per_minute, settings.character_quota
        self.clock = clock
        self.window_start = clock()
        self.requests: dict[str, int] = {}  # this window's requests per caller; cleared when a window starts
        self.characters: dict[str, int] = {}  # characters per caller since this replica started (with keys or a quota)

    @property
    def required(self) -> bool:
        return bool(self.keys)

    def caller(self, key: str | None, address: str | None) -> str | None:
        """The caller's identity: the key when keys are configured (None: missing or not a configured key),
        else the client address (any key, or none, is accepted)."""
        if self.keys:
            return key if key in self.keys else None
        return f"address:{address or 'unknown'}"

    def admit(self, caller: str) -> None:
        """Count one request of `caller`; RateLimited (with the seconds to the next window) over the limit."""
        if not self.per_minute:
            return
        now = self.clock()
        if now - self.window_start >= WINDOW_S:
            self.window_start += WINDOW_S * ((now - self.window_start) // WINDOW_S)
            self.requests.clear()
        if self.requests.get(caller, 0) >= self.per_minute:
            raise RateLimited(self.per_minute, max(1, math.ceil(self.window_start + WINDOW_S - now)))
        self.requests[caller] = self.requests.get(caller, 0) + 1

    @property
    def enforcing(self) -> bool:
        """Whether anything is checked per request (keys, a rate limit or a quota)."""
        return bool(self.keys or self.per_minute or self.quota)

    @property
    def counting(self) -> bool:
        """Whether characters are counted (keys or a quota): an open, unlimited server counts none."""
        return bool(self.keys or self.quota)

    @contextmanager
    def spending(self, caller: str, characters: int):
        """Charge `characters` to `caller` for the work inside; refunded if the work fails. QuotaExceeded before
        any work when the charge would go past the quota."""
        used = self.characters.get(caller, 0)
        if self.quota and used + characters > self.quota:
            raise QuotaExceeded(f"character quota exceeded: {used} of {self.quota} used, this request has "
                                f"{characters}", limit=self.quota)
        if not self.counting:  # open and unlimited: no count to keep, one per client address
            yield
            return
        self.characters[caller] = used + characters
        try:
            yield
        except BaseException:
            self.characters[caller] -= characters
            raise

    def usage(self, caller: str) -> tuple[int, int | None]:
        """(characters used, the quota or None)."""
        return self.characters.get(caller, 0), self.quota or None
