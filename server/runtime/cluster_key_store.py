"""The key store of a Ray cluster: the head node's file is the one source of truth for every replica's counts (and
for every replica's glossaries: the glossary store lives in the same file).

A replica on the head node opens that file itself (SQLite keeps counts exact across a node's processes). A replica
on any other node cannot see it, so it reaches it through StoreActor: one named, detached actor on the head node
holding a connection to the same file, one round trip per store call. Head-node replicas and the actor write the
same file under SQLite's lock, so a key limited to N requests a minute gets N across all nodes, and its usage
survives the cluster as it survives a restart. A request's counts are awaited, so the replica's event loop serves
other requests during the round trips.
"""

from __future__ import annotations

import hashlib
from typing import Any

import ray

from ..glossary_store import GlossaryStore
from ..key_store import KeyStore

HEAD_RESOURCE = "node:__internal_head__"  # every Ray head node has it: pins the actor beside the file
NAMESPACE = "seq2seq-serve"


class StoreActor:
    """A store (KeyStore, GlossaryStore, DocumentStore) on the head node, called by replicas elsewhere (one call at
    a time: one connection)."""

    def __init__(self, kind: type, path: str):
        self.store = kind(path)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.store, method)(*args)


class RemoteKeyStore:
    """The calls Keys makes of a KeyStore, answered by the head node's StoreActor: the counts of each request
    awaited (a round trip), the keys at start and at each refresh (every few seconds) fetched at once."""

    def __init__(self, actor):
        self.actor = actor

    def sync_env(self, keys: tuple[str, ...]) -> None:
        ray.get(self.actor.call.remote("sync_env", keys))

    def active(self) -> dict:
        return ray.get(self.actor.call.remote("active"))

    async def admit(self, caller: str, minute: int, limit: int) -> bool:
        return await self.actor.call.remote("admit", caller, minute, limit)

    async def forget_minutes_before(self, minute: int) -> None:
        await self.actor.call.remote("forget_minutes_before", minute)

    async def charge(self, caller: str, characters: int, quota: int) -> int | None:
        return await self.actor.call.remote("charge", caller, characters, quota)

    async def refund(self, caller: str, characters: int) -> None:
        await self.actor.call.remote("refund", caller, characters)

    async def usage(self, caller: str) -> tuple[int, int]:
        return await self.actor.call.remote("usage", caller)


class RemoteGlossaryStore:
    """Every GlossaryStore call, answered by the head node's actor: awaited, one round trip each."""

    def __init__(self, actor):
        self.actor = actor

    def __getattr__(self, method: str):
        async def call(*args: Any) -> Any:
            return await self.actor.call.remote(method, *args)

        return call


def on_head_node() -> bool:
    here = ray.get_runtime_context().get_node_id()
    return any(node["NodeID"] == here and HEAD_RESOURCE in node["Resources"] for node in ray.nodes() if node["Alive"])


def head_store(kind: type, path: str):
    """The actor holding a `kind` store of `path` on the head node (made by the first replica that needs it; named
    by the kind and the path, so another store file gets an actor of its own)."""
    name = f"{kind.__name__}-" + hashlib.sha256(path.encode()).hexdigest()[:16]
    return ray.remote(StoreActor).options(
        name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
        resources={HEAD_RESOURCE: 0.001}).remote(kind, path)


def cluster_key_store(path: str) -> KeyStore | RemoteKeyStore:
    """The key store for a replica: the file itself on the head node, else the head node's actor."""
    return KeyStore(path) if on_head_node() else RemoteKeyStore(head_store(KeyStore, path))


def cluster_glossary_store(path: str) -> GlossaryStore | RemoteGlossaryStore:
    """The glossary store for a replica: the file itself on the head node, else the head node's actor."""
    return GlossaryStore(path) if on_head_node() else RemoteGlossaryStore(head_store(GlossaryStore, path))
