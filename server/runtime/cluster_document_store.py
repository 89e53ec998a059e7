"""The document jobs of a Ray cluster: the head node's folder is the one source of truth for every replica, as the key
store is (runtime.cluster_key_store). A replica on the head node opens the folder itself; one elsewhere calls
a StoreActor, one named, detached actor on the head node holding the same folder, so a job submitted through
any replica is claimed by one, and polled and fetched through any."""

from __future__ import annotations

from typing import Any

from ..document_store import DocumentStore, LocalDocumentStore
from .cluster_key_store import head_store, on_head_node


class RemoteDocumentStore:
    """DocumentJobs' calls answered by the head node's StoreActor (a round trip each, awaited)."""

    def __init__(self, actor):
        self.actor = actor

    async def call(self, method: str, *args: Any) -> Any:
        return await self.actor.call.remote(method, *args)


def cluster_document_store(folder: str) -> LocalDocumentStore | RemoteDocumentStore:
    """The document jobs for a replica: the folder itself on the head node, else the head node's actor for it."""
    if on_head_node():
        return LocalDocumentStore(DocumentStore(folder))
    return RemoteDocumentStore(head_store(DocumentStore, folder))
