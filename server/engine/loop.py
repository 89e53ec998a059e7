"""The engine loop: a background thread per model runs scheduler → engine steps; asyncio submits and awaits.

Outputs go back to each event loop through a Mailbox: one call_soon_threadsafe per step however many outputs
the step made (a wake-up per output cost the event loop more than the outputs themselves). A failed step fails
the sequences in the batch (never the whole server); a delivery that fails (its event loop is gone) cancels that
sequence only; a heartbeat tells readiness and health whether the loop is progressing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from functools import partial
from typing import AsyncIterator, Callable

from model import AlignmentInput, DecodeParams, ModelBundle, word_alignments

from ..errors import EngineFailed
from ..metrics import EngineStats
from ..settings import Settings
from .engine import Engine
from .scheduler import Scheduler
from .sequence import ErrorOutput, Output, Sequence, Status, TokenOutput

log = logging.getLogger(__name__)


class Mailbox:
    """Outputs from the engine thread to the queues of one asyncio event loop, handed over in one wake-up."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.items, self.lock = loop, [], threading.Lock()

    def post(self, queue: asyncio.Queue, sequence: Sequence, output: Output) -> None:
        """(sequence, output) into `queue`. Thread-safe; raises RuntimeError when the event loop is closed (nothing
        of this post is kept)."""
        with self.lock:
            self.items.append((queue, (sequence, output)))
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
    The engine runs in this process (EngineLoop) or in a process of its own (runtime.engine_process)."""

    def __init__(self):
        self.mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = weakref.WeakKeyDictionary()

    def submit(self, sources: list[tuple[list[int], DecodeParams]], request_id: int | None = None,
               stream: bool = True, into: asyncio.Queue | None = None,
               features: list | None = None) -> list[tuple[Sequence, asyncio.Queue]]:
        """Queue one sequence per (source ids, params) (all or none: QueueFull); each gets a queue of its own (or
        all post into `into`) that receives (sequence, output) pairs: every new token when `stream`, then the
        final output. The sequences form one request (the scheduler shares rows between requests): a new one, or
        `request_id` when a request submits more later. `features`: per source, an audio window's (model.Source's)
        or None."""
        loop = asyncio.get_running_loop()
        mailbox = self.mailboxes.get(loop) or self.mailboxes.setdefault(loop, Mailbox(loop))
        out = []
        for (ids, params), window in zip(sources, features or [None] * len(sources)):
            own: asyncio.Queue[tuple[Sequence, Output]] = into or asyncio.Queue()
            sequence = Sequence(ids, params, None, request_id=request_id, stream=stream,  # deliver: set below
                                features=window)
            sequence.deliver = partial(mailbox.post, own, sequence)
            request_id = sequence.request_id  # the first one's id when none was given
            out.append((sequence, own))
        self.add([s for s, _ in out])
        return out

    async def outputs(self, sequence: Sequence, queue: asyncio.Queue) -> AsyncIterator[Output]:
        """Outputs of one sequence (alone in its queue) until its final one; cancelling the consumer cancels the
        sequence."""
        try:
            while True:
                _, output = await queue.get()
                yield output
                if not isinstance(output, TokenOutput):
                    return
        finally:
            self.cancel(sequence)

    def deliver_or_cancel(self, sequence: Sequence, output: Output) -> None:
        """Hand one output to its sequence; if that fails (its event loop is closed), cancel just that sequence."""
        try:
            sequence.deliver(output)
        except Exception:
            log.exception("delivering to sequence %s failed; cancelling it", sequence.id)
            self.cancel(sequence)

    def add(self, sequences: list[Sequence]) -> None:
        """Queue all of `sequences` or none (QueueFull); thread-safe."""
        raise NotImplementedError

    def cancel(self, *sequences: Sequence) -> None:
        """Cancel unfinished sequences together: a request's sequences all leave before the next schedule, so
        none of its waiting ones is admitted while the others are being cancelled."""
        raise NotImplementedError

    async def align(self, inputs: list[AlignmentInput]) -> list:
        """Word alignments of translated units (model.word_alignments)."""
        raise NotImplementedError

    @property
    def demand_rows(self) -> int:
        """Batch rows this engine's unfinished sequences hold or wait for (what the autoscaler weighs)."""
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
        self.lock = threading.Condition()  # over an RLock: a delivery that fails cancels under it (deliver_or_cancel)
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
    def demand_rows(self) -> int:
        with self.lock:
            return self.scheduler.demand_rows

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def seconds_since_progress(self) -> float:
        return time.monotonic() - self.heartbeat

    # ---- asyncio side -------------------------------------------------------------------------------------
    def add(self, sequences: list[Sequence]) -> None:
        with self.lock:
            self.scheduler.add(sequences)
            self._record_queues()
            self.lock.notify()

    def cancel(self, *sequences: Sequence) -> None:
        with self.lock:
            unfinished = [s for s in sequences if not s.done]
            for sequence in unfinished:
                self.scheduler.cancel(sequence)
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
                for sequence, output in update.outputs:
                    self.deliver_or_cancel(sequence, output)
                self._record_queues()
            self.stats.stepped(now - start, self.engine.rows_in_use, update, now)
            self.heartbeat = time.monotonic()

    def _record_queues(self) -> None:
        self.stats.queues(len(self.scheduler.waiting), len(self.scheduler.running), self.engine.rows_in_use)

    def _fail_running(self, error: Exception) -> None:
        self.stats.failed()
        with self.lock:
            failed = list(self.scheduler.running.values())
            for sequence in failed:
                self.scheduler.finish(sequence, Status.FAILED)
                failure = EngineFailed(f"the engine failed while decoding: {error}")
                self.deliver_or_cancel(sequence, ErrorOutput(failure))
            self.engine.reset()
            self._record_queues()
        self.heartbeat = time.monotonic()


def start_engine_loop(bundle: ModelBundle, settings: Settings, stats: EngineStats, max_waiting: int | None,
                      left_waiting: Callable[[int], None] = lambda count: None) -> EngineLoop:
    """The model's engine loop in this process; `settings` limited to the model (front.registry.model_limits);
    `max_waiting` sequences may wait (None: the caller counts them, told by `left_waiting` as they leave the
    queue: Scheduler)."""
    engine = Engine(bundle.network, settings.max_batch_rows, settings.max_input_tokens, settings.max_new_tokens,
                    static_shapes=settings.cuda_graphs and bundle.network.device.type == "cuda")
    scheduler = Scheduler(settings.max_batch_rows, settings.max_batch_tokens, max_waiting, settings.max_request_share,
                          left_waiting)
    return EngineLoop(engine, scheduler, stats, partial(word_alignments, bundle)).start()
