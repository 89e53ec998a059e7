"""The stores of a Ray cluster: the head node's files are the one source of truth for every replica's keys and counts,
glossaries and document jobs.

A replica on the head node opens those files itself (SQLite keeps counts exact across a node's processes). A replica
on any other node cannot see them, so it reaches each through a StoreActor: one named, detached actor on the head
node holding the same file (or folder), one round trip per store call. Head-node replicas and the actor write the
same file under SQLite's lock, so a key limited to N requests a minute gets N across all nodes, its usage survives the
cluster as it survives a restart, and a document job submitted through any replica is claimed by one, and polled and
fetched through any. A call is awaited, so the replica's event loop serves other requests during the round trip.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, TypeVar

import ray

from ..stores import LocalStore, Store

HEAD_RESOURCE = "node:__internal_head__"  # every Ray head node has it: pins the actor beside the file
NAMESPACE = "seq2seq-serve"
R = TypeVar("R")
L = TypeVar("L", bound=LocalStore)


class StoreActor:
    """A store on the head node, called by replicas elsewhere (one call at a time: one connection). The method comes
    as the store class's own function, pickled by its qualified name."""

    def __init__(self, kind: type[LocalStore], path: str):
        self.store = kind(path)

    def run(self, method: Callable[..., R], *args: Any) -> R:
        return self.store.now(method, *args)


class RemoteStore:
    """A Store answered by the head node's StoreActor: awaited (a round trip), or at once where the caller blocks."""

    def __init__(self, actor):
        self.actor = actor

    async def run(self, method: Callable[..., R], *args: Any) -> R:
        return await self.actor.run.remote(method, *args)

    def now(self, method: Callable[..., R], *args: Any) -> R:
        return ray.get(self.actor.run.remote(method, *args))


def on_head_node() -> bool:
    here = ray.get_runtime_context().get_node_id()
    return any(node["NodeID"] == here and HEAD_RESOURCE in node["Resources"] for node in ray.nodes() if node["Alive"])


def head_store(kind: type[L], path: str) -> Store[L]:
    """The `kind` store (KeyStore, GlossaryStore, DocumentStore) of `path` for a replica: the file itself on the head
    node, else the head node's actor holding it (made by the first replica that needs it; named by the kind and the
    path, so another store file gets an actor of its own)."""
    if on_head_node():
        return kind(path)
    name = f"{kind.__name__}-" + hashlib.sha256(path.encode()).hexdigest()[:16]
    return RemoteStore(ray.remote(StoreActor).options(
        name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
        resources={HEAD_RESOURCE: 0.001}).remote(kind, path))
