"""Request forwarding inside the Ray Serve application (runtime.deployment): the app of a Seq2SeqServer replica serves
a model this replica holds here, and forwards a job for any other, as a plain domain job, through Serve's model
multiplexing to a replica that holds it or loads it."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, AsyncIterator

from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from model import Segment, Transcript

from ..domain import (GenerationJob, GenerationResult, ModelInfo, SpeechJob, StreamEvent, TranslationJob,
                      TranslationResult)
from ..errors import QueueFull, ServerError
from ..front import HeldModel
from ..front.streams import opened
from .local import RegisteredModels
from .replica_lost import ReplicaLost, once_more_if_lost

if TYPE_CHECKING:
    from ray.serve._private.request_router.replica_wrapper import ReplicaSelection


def unwrap(error: Exception) -> Exception:
    """Errors from a model replica → the error an HTTP client should see."""
    if isinstance(error, RayTaskError) and isinstance(error.cause, ServerError):
        return error.cause
    if isinstance(error, BackPressureError):
        return QueueFull("all model replicas are at their queue limit; retry later")
    if isinstance(error, RayActorError):
        return ReplicaLost("the replica serving this request died; retry")
    return error


class RemoteModel:
    """The HeldModel interface the app uses, forwarded to the Seq2SeqServer replica Serve's multiplexing picks
    for the model. When it picks this very replica, the job is served here instead: a stream through a handle
    back to the replica it came from loses items and hangs (Ray 2.60; between two replicas it does not), and a
    unary call to itself only adds a hop. A job whose replica died before answering (a stream: before its first
    event) goes once more (runtime.replica_lost), here: this replica is alive, while Serve's router may still pick
    the dead one (it holds the model) until it learns of the death."""

    def __init__(self, handle: DeploymentHandle, name: str, this_replica: str, local, timeout_s: float):
        self.name, self.handle = name, handle.options(multiplexed_model_id=name)
        self.this_replica, self.local = this_replica, local  # local: async (name) -> HeldModel
        self.timeout_s = timeout_s  # the request's (Settings.request_timeout_s)

    async def translate(self, job: TranslationJob) -> TranslationResult:
        return await self._unary("translate", job)

    async def generate(self, job: GenerationJob) -> GenerationResult:
        return await self._unary("generate", job)

    async def _unary(self, method: str, job):
        arrived = asyncio.get_running_loop().time()
        # the second attempt (under a timeout) is the retry of a lost replica's job: served here
        return await once_more_if_lost(lambda retry: self._unary_once(method, job, here=retry is not None),
                                       self.timeout_s, arrived)

    async def _unary_once(self, method: str, job, here: bool):
        """`method` of Seq2SeqServer (and of HeldModel) on the replica Serve picks, or here."""
        if not here:
            async with self._route(method, job) as replica:
                if replica is not None:
                    return await self.handle.dispatch(replica, job)
        return await getattr(await self.local(self.name), method)(job)

    def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        return self._events("generate_stream", "generate_events", job)

    def transcribe_events(self, job: SpeechJob) -> AsyncIterator[Segment | Transcript]:
        return self._events("transcribe_stream", "transcribe_events", job)

    async def _events(self, method: str, held_method: str, job) -> AsyncIterator:
        """The events of Seq2SeqServer's streaming `method` (HeldModel's `held_method` when served here)."""
        arrived = asyncio.get_running_loop().time()
        events = await once_more_if_lost(
            lambda retry: opened(self._events_once(method, held_method, job, here=retry is not None)),
            self.timeout_s, arrived)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()

    async def _events_once(self, method: str, held_method: str, job, here: bool) -> AsyncIterator:
        if not here:
            async with self._route(method, job, stream=True) as replica:
                if replica is not None:
                    stream = self.handle.dispatch(replica, job)
                    try:
                        async for event in stream:
                            yield event
                    finally:
                        stream.cancel()
                    return
        async for event in getattr(await self.local(self.name), held_method)(job):
            yield event

    @asynccontextmanager
    async def _route(self, method: str, job, stream: bool = False) -> AsyncIterator[ReplicaSelection | None]:
        """The replica Serve picks for this job, held while the job runs there; None when it is this replica
        (released at once: the caller then serves the job here). Errors come out as an HTTP client sees them."""
        try:
            async with self.handle.options(method_name=method, stream=stream).choose_replica(job) as selection:
                yield None if selection.replica_id == self.this_replica else selection
        except Exception as e:
            raise unwrap(e) from None


class ReplicaModels(RegisteredModels):
    """ModelProvider for the app inside a Seq2SeqServer replica: a model this replica holds serves here; any other
    is forwarded to the replica Serve's multiplexing picks for it."""

    def __init__(self, server):
        super().__init__(server.settings, server.registry)
        self.server = server
        self.handle: DeploymentHandle | None = None  # to this deployment, made at the first forwarded request

    async def get(self, name: str | None, source_lang: str | None = None, target_lang: str | None = None,
                  speech: bool = False):
        name = self.registry.resolve(name, source_lang, target_lang, speech)
        if name in self.server.loaded:
            return await self.local(name)
        if self.handle is None:
            context = serve.get_replica_context()
            self.handle = serve.get_deployment_handle(context.deployment, app_name=context.app_name)
        return RemoteModel(self.handle, name, serve.get_replica_context().replica_id.unique_id, self.local,
                           self.settings.request_timeout_s)

    def models(self) -> list[ModelInfo]:
        return [replace(info, replicas=self.server.replicas.value) for info in super().models()]

    async def local(self, name: str) -> HeldModel:
        """The model in this replica, loaded here if need be, through the multiplexer: it keeps the LRU order."""
        return (await self.server.load(name)).service

    async def health(self, stale_after_s: float) -> tuple[bool, str]:
        """This replica's engines, answered here: health never queues behind decoding work."""
        return self.server.health(stale_after_s)
