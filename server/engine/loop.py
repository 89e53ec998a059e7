"""The engine loop: a background thread per model runs scheduler → engine steps; asyncio submits and awaits.

Outputs go back to each event loop through a Mailbox: one call_soon_threadsafe per step however many outputs
the step made (a wake-up per output cost the event loop more than the outputs themselves). A failed step fails
the requests in the batch (never the whole server); a delivery that fails (its event loop is gone) cancels that
request only; a heartbeat tells readiness and health whether the loop is progressing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from functools import partial
from typing import AsyncIterator, Callable

from model import AlignmentInput, DecodeParams

from .engine import Engine
from .errors import EngineFailed
from .metrics import EngineStats
from .request import ErrorOutput, Output, SeqRequest, Status, TokenOutput
from .scheduler import Scheduler

log = logging.getLogger(__name__)


class Mailbox:
    """Outputs from the engine thread to the queues of one asyncio event loop, handed over in one wake-up."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.items, self.lock = loop, [], threading.Lock()

    def post(self, queue: asyncio.Queue, request: SeqRequest, output: Output) -> None:
        """(request, output) into `queue`. Thread-safe; raises RuntimeError when the event loop is closed (nothing
        of this post is kept)."""
        with self.lock:
            self.items.append((queue, (request, output)))
            if len(self.items) > 1:
                return  # a wake-up is already on its way
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:
                self.items.clear()
                raise

    def _drain(self) -> None:
        with self.lock:
            items, self.items = self.items, []
        for queue, output in items:
            queue.put_nowait(output)


class EngineHandle:
    """The asyncio side of one model's engine: submit sequences, await their outputs, cancel them, align words.
    The engine runs in this process (EngineLoop) or in a process of its own (engine_process.EngineProcess)."""

    def __init__(self):
        self.mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = weakref.WeakKeyDictionary()

    def submit(self, sources: list[tuple[list[int], DecodeParams]], group: int | None = None,
               stream: bool = True, into: asyncio.Queue | None = None) -> list[tuple[SeqRequest, asyncio.Queue]]:
        """Queue one sequence per (source ids, params) (all or none: QueueFull); each gets a queue of its own (or
        all post into `into`) that receives (request, output) pairs: every new token when `stream`, then the
        final output. The sequences form one group (the scheduler shares rows between groups): a new one, or
        `group` when a request submits more later."""
        loop = asyncio.get_running_loop()
        mailbox = self.mailboxes.get(loop) or self.mailboxes.setdefault(loop, Mailbox(loop))
        out = []
        for ids, params in sources:
            own: asyncio.Queue[tuple[SeqRequest, Output]] = into or asyncio.Queue()
            request = SeqRequest(ids, params, None, group=group, stream=stream)  # deliver: set below, it names it
            request.deliver = partial(mailbox.post, own, request)
            group = request.group  # the first one's id when no group was given
            out.append((request, own))
        self.add([r for r, _ in out])
        return out

    async def outputs(self, request: SeqRequest, queue: asyncio.Queue) -> AsyncIterator[Output]:
        """Outputs of one sequence (alone in its queue) until its final one; cancelling the consumer cancels the
        sequence."""
        try:
            while True:
                _, output = await queue.get()
                yield output
                if not isinstance(output, TokenOutput):
                    return
        finally:
            self.cancel(request)

    def add(self, requests: list[SeqRequest]) -> None:
        """Queue all of `requests` or none (QueueFull); thread-safe."""
        raise NotImplementedError

    def cancel(self, *requests: SeqRequest) -> None:
        """Cancel unfinished sequences together: a request's sequences all leave before the next schedule, so
        none of its waiting ones is admitted while the others are being cancelled."""
        raise NotImplementedError

    async def align(self, inputs: list[AlignmentInput]) -> list:
        """Word alignments of translated units (model.word_alignments)."""
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def seconds_since_progress(self) -> float:
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> None:
        raise NotImplementedError


class EngineLoop(EngineHandle):
    """The engine thread of one model in this process. `aligner`: model.word_alignments over the model's bundle
    (a torch pass; run in the encoder's thread beside the decoder steps, the network's forward only reads it)."""

    def __init__(self, engine: Engine, scheduler: Scheduler, stats: EngineStats,
                 aligner: Callable[[list[AlignmentInput]], list] | None = None):
        super().__init__()
        self.engine, self.scheduler, self.stats, self.aligner = engine, scheduler, stats, aligner
        self.lock = threading.Condition()
        self.heartbeat = time.monotonic()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> "EngineLoop":
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.thread.join(timeout)
        self.engine.close()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def seconds_since_progress(self) -> float:
        return time.monotonic() - self.heartbeat

    # ---- asyncio side -------------------------------------------------------------------------------------
    def add(self, requests: list[SeqRequest]) -> None:
        with self.lock:
            self.scheduler.add(requests)
            self._record_queues()
            self.lock.notify()

    def cancel(self, *requests: SeqRequest) -> None:
        with self.lock:
            unfinished = [r for r in requests if not r.done]
            for request in unfinished:
                self.scheduler.cancel(request)
            if unfinished:
                self._record_queues()
                self.lock.notify()

    async def align(self, inputs: list[AlignmentInput]) -> list:
        return await asyncio.wrap_future(self.engine.beside_decoding(self.aligner, inputs))

    # ---- engine thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.scheduler.has_work() and not self.stopping:
                    self.heartbeat = time.monotonic()
                    self.lock.wait(0.25)
                if self.stopping:
                    return
                plan = self.scheduler.schedule()
                self.stats.admitted(plan.admit, time.monotonic())
                self._record_queues()
            start = time.monotonic()
            try:
                events = self.engine.execute(plan)
            except Exception as e:  # a bug or an out-of-memory: fail this batch, keep serving
                log.exception("engine step failed")
                self._fail_running(e)
                continue
            now = time.monotonic()
            with self.lock:
                update = self.scheduler.update(events, now)
                for request, output in update.outputs:
                    self._deliver(request, output)
                self._record_queues()
            self.stats.stepped(now - start, self.engine.rows_in_use, update, now)
            self.heartbeat = time.monotonic()

    def _deliver(self, request: SeqRequest, output: Output) -> None:
        """Hand one output to its request; if that fails (its event loop closed), cancel just that request."""
        try:
            request.deliver(output)
        except Exception:
            log.exception("delivering to request %s failed; cancelling it", request.id)
            if not request.done:
                self.scheduler.cancel(request)

    def _record_queues(self) -> None:
        self.stats.queues(len(self.scheduler.waiting), len(self.scheduler.running), self.engine.rows_in_use)

    def _fail_running(self, error: Exception) -> None:
        self.stats.failed()
        with self.lock:
            failed = list(self.scheduler.running.values())
            for request in failed:
                self.scheduler.finish(request, Status.FAILED)
                self._deliver(request, ErrorOutput(EngineFailed(f"the engine failed while decoding: {error}")))
            self.engine.reset()
            self._record_queues()
        self.heartbeat = time.monotonic()
