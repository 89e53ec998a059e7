"""The one way the services reach a store (the key store, the glossary store, the document jobs): a typed call of one
of the store's own methods, `await store.run(KeyStore.admit, caller, minute, limit)`, never a method named by a string.

A store of this machine's files is its own `Store`: `run` calls the method in a thread, so SQLite and the files stay
off the event loop. On a Ray cluster a replica off the head node holds runtime.head_store.RemoteStore instead, which
runs the same method on the head node's store (one round trip). The store's methods hold its lock
(sqlite_file.one_at_a_time): its one connection serves one thread at a time.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Concatenate, ParamSpec, Protocol, TypeVar

S = TypeVar("S", contravariant=True)
P = ParamSpec("P")
R = TypeVar("R")


class Store(Protocol[S]):
    async def run(self, method: Callable[Concatenate[S, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`method` of the store, awaited: the event loop serves other requests meanwhile."""

    def now(self, method: Callable[Concatenate[S, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`method` of the store, blocking: for start-up, and reads rare enough to hold the event loop (Keys'
        refresh every few seconds)."""


class LocalStore:
    """A store of this machine's files: a Store of itself."""

    async def run(self, method: Callable[..., R], *args, **kwargs) -> R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    def now(self, method: Callable[..., R], *args, **kwargs) -> R:
        return method(self, *args, **kwargs)
