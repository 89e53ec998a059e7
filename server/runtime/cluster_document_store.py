"""The document jobs of a Ray cluster: the head node's folder is the one source of truth for every replica, as the key
store is (runtime.cluster_key_store). A replica on the head node opens the folder itself; one elsewhere calls
DocumentStoreActor, one named, detached actor on the head node holding the same folder, so a job submitted through
any replica is claimed by one, and polled and fetched through any."""

from __future__ import annotations

import hashlib
from typing import Any

import ray

from ..document_store import DocumentStore, LocalDocumentStore
from .cluster_key_store import HEAD_RESOURCE, NAMESPACE, on_head_node


class DocumentStoreActor:
    """A DocumentStore on the head node, called by replicas elsewhere."""

    def __init__(self, folder: str):
        self.store = DocumentStore(folder)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.store, method)(*args)


class RemoteDocumentStore:
    """DocumentJobs' calls answered by the head node's DocumentStoreActor (a round trip each, awaited)."""

    def __init__(self, actor):
        self.actor = actor

    async def call(self, method: str, *args: Any) -> Any:
        return await self.actor.call.remote(method, *args)


def cluster_document_store(folder: str) -> LocalDocumentStore | RemoteDocumentStore:
    """The document jobs for a replica: the folder itself on the head node, else the head node's actor for it."""
    if on_head_node():
        return LocalDocumentStore(DocumentStore(folder))
    name = "document-store-" + hashlib.sha256(folder.encode()).hexdigest()[:16]
    actor = ray.remote(DocumentStoreActor).options(
        name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
        resources={HEAD_RESOURCE: 0.001}).remote(folder)
    return RemoteDocumentStore(actor)
