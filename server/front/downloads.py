"""Translated files waiting to be downloaded (LibreTranslate's /translate_file answers with a URL to fetch).

Bounded and expiring: at most `max_files` files, each kept `ttl_s` seconds, the oldest dropped first when full.
In memory, per ingress replica: with several ingress replicas under Ray Serve a download can reach a replica
that does not hold the file (404); one ingress replica (the default) holds them all.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import PurePath
from typing import Callable


@dataclass(frozen=True)
class StoredFile:
    filename: str  # as the client named it
    content: bytes
    expires: float


class Downloads:
    def __init__(self, max_files: int, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_files, self.ttl_s, self.clock = max_files, ttl_s, clock
        self.files: OrderedDict[str, StoredFile] = OrderedDict()  # oldest first

    def put(self, filename: str, content: bytes) -> str:
        """Keep `content`; the name to download it by: a random id, a dot, and the file's own name."""
        self._expire()
        while len(self.files) >= self.max_files:
            self.files.popitem(last=False)
        name = f"{uuid.uuid4().hex}.{PurePath(filename).name or 'file'}"
        self.files[name] = StoredFile(PurePath(filename).name, content, self.clock() + self.ttl_s)
        return name

    def get(self, name: str) -> StoredFile | None:
        self._expire()
        return self.files.get(name)

    def _expire(self) -> None:
        now = self.clock()
        while self.files and next(iter(self.files.values())).expires <= now:
            self.files.popitem(last=False)
