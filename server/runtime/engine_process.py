"""A model's engine in a process of its own (`engine_process`, the default on CPU), the parent's side: the HTTP
side keeps the tokenizer, validation and detokenization; a child process (engine_child) loads the weights and
runs the engine loop.

Why: in one process the event loop, the encoder thread and the decoder thread share one interpreter lock. Each
torch op of a decoder step lets the lock go, and taking it back waits for whichever thread holds it (under HTTP
load, loadtests/README.md). In its own process the step contends with nothing but the encoder.

What crosses the pipes (pickled, batched):
  to the engine    ("submit", [(id, request id, source ids, params, stream, arrived_at)]), ("cancel", [id]),
                   ("align", call id, inputs), ("stop",)
  from the engine  ("ready",) or ("failed", reason) once loaded; ("outputs", [(id, output)], metric
                   observations) once per step; ("reply", call id, result, error)
Who holds what: the status of the server's Sequence objects is written here only, by `_finish` (final output,
cancellation, a dead engine), and `unfinished` holds exactly those not yet finished; the engine process's own
Sequence objects are its scheduler's working state (rows, steps, first token), which it reports only as outputs.
Backpressure stays synchronous: the sequences sent and not yet admitted or cancelled are counted in shared
memory (runtime.queued), so `submit` raises QueueFull at once, as in one process. A heartbeat in shared memory
tells health how recently the loop progressed. If the engine process dies (killed, out of memory), its requests
fail with EngineFailed (503) and another is started; the server stays up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import threading
import time

from model import AlignmentInput

from ..engine.loop import EngineHandle
from ..engine.sequence import ErrorOutput, Output, Sequence, Status, TokenOutput
from ..errors import EngineFailed
from ..metrics import EngineStats, record
from ..settings import Settings
from .engine_child import send, serve_engine
from .queued import QueuedCount

log = logging.getLogger(__name__)


class EngineProcess(EngineHandle):
    """The engine of the model at `path` in a child process, `settings` limited to the model. Blocks until the
    child has loaded the model (its load errors are raised here)."""

    def __init__(self, path: str | None, settings: Settings, name: str, threads: int):
        super().__init__()
        self.path, self.settings, self.name, self.threads = path, settings, name, threads
        self.stats = EngineStats(name)
        self.context = multiprocessing.get_context("spawn")
        self.lock = threading.Lock()  # unfinished, calls and the pipe to the engine
        self.unfinished: dict[int, Sequence] = {}  # by id: the sequences sent and not yet finished (see _finish)
        self.calls: dict[int, asyncio.Future] = {}
        self.call_ids = itertools.count()
        self.stopping = False
        self._start()
        self.reader = threading.Thread(target=self._read, name=f"engine-process-{name}", daemon=True)
        self.reader.start()

    def _start(self) -> None:
        """A new engine process, loaded; until it is, sends go to the one before (a dead one: EngineFailed)."""
        queued = QueuedCount(self.context)
        heartbeat = self.context.Value("d", time.monotonic())  # the engine loop's last progress; -1: it died
        inbox, to_engine = self.context.Pipe(duplex=False)
        from_engine, outbox = self.context.Pipe(duplex=False)
        process = self.context.Process(target=serve_engine, name=f"s2s-engine-{self.name}", daemon=True,
                                       args=(self.path, self.settings, self.name, self.threads, inbox, outbox, queued,
                                             heartbeat))
        process.start()
        inbox.close()
        outbox.close()
        while not from_engine.poll(0.5):
            if not process.is_alive():
                raise RuntimeError(f"the engine process of {self.name} exited ({process.exitcode}) while loading "
                                   f"the model")
        message = from_engine.recv()
        if message[0] != "ready":
            process.join(10)
            raise RuntimeError(f"the engine process of {self.name} could not load the model: {message[1]}")
        with self.lock:
            self.process, self.queued, self.heartbeat = process, queued, heartbeat
            self.to_engine, self.from_engine = to_engine, from_engine

    # ---- asyncio side -------------------------------------------------------------------------------------
    def add(self, sequences: list[Sequence]) -> None:
        with self.lock:  # self.queued: the count of the engine process the sequences go to
            self.queued.take(len(sequences), self.settings.max_waiting_sequences)
            if not self._send(("submit", [(s.id, s.request_id, s.source_ids, s.params, s.stream, s.arrived_at,
                                           s.features) for s in sequences]),
                              shares_tensors=any(s.features is not None for s in sequences)):
                self.queued.give_back(len(sequences))
                raise EngineFailed("the engine process is restarting; retry shortly")
            self.unfinished.update((s.id, s) for s in sequences)

    def cancel(self, *sequences: Sequence) -> None:
        with self.lock:
            ids = [s.id for s in sequences if self._finish(s.id, Status.CANCELLED) is not None]
            if ids:
                self._send(("cancel", ids))

    def _finish(self, id: int, status: Status) -> Sequence | None:
        """Under self.lock: the unfinished sequence `id` takes its final status and leaves `unfinished`; None when
        it has left already (its final output and its cancellation crossed). The one place a status is written."""
        sequence = self.unfinished.pop(id, None)
        if sequence is not None:
            sequence.status = status
        return sequence

    async def align(self, inputs: list[AlignmentInput]) -> list:
        future = asyncio.get_running_loop().create_future()
        with self.lock:
            call = next(self.call_ids)
            self.calls[call] = future
            if not self._send(("align", call, inputs)):
                del self.calls[call]
                raise EngineFailed("the engine process is restarting; retry shortly")
        return await future

    def _send(self, message, shares_tensors: bool = False) -> bool:
        """Under self.lock. False when the engine process is gone."""
        try:
            send(self.to_engine, message, shares_tensors)
            return True
        except (OSError, ValueError):  # a broken or closed pipe
            return False

    @property
    def demand_rows(self) -> int:
        """The sequences sent and not finished are the ones the engine's scheduler runs or keeps waiting (or are
        on the pipe to it): their rows, counted here without asking the engine process."""
        with self.lock:
            return sum(s.rows for s in self.unfinished.values())

    @property
    def alive(self) -> bool:
        return self.process.is_alive() and self.heartbeat.value >= 0

    def seconds_since_progress(self) -> float:
        return time.monotonic() - self.heartbeat.value if self.heartbeat.value >= 0 else float("inf")

    def stop(self, timeout: float = 10.0) -> None:
        with self.lock:
            self.stopping = True
            self._send(("stop",))
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
        self.reader.join(timeout)

    # ---- reader thread ------------------------------------------------------------------------------------
    def _read(self) -> None:
        """Hands the engine's outputs and replies to their sequences; when the engine process dies, fails what it
        held and starts another."""
        while True:
            try:
                message = self.from_engine.recv()
            except (EOFError, OSError):
                if self._engine_died():
                    return
                continue
            try:
                self._handle(message)
            except Exception:  # a bug: keep delivering the others
                log.exception("handling a message of the engine process of %s failed", self.name)

    def _handle(self, message) -> None:
        if message[0] == "outputs":
            self._deliver(message[1])
            for observation in message[2]:
                record(*observation)
        elif message[0] == "reply":
            _, call, result, error = message
            with self.lock:
                future = self.calls.pop(call, None)
            if future is not None:
                settle(future, result, error)

    def _deliver(self, outputs: list[tuple[int, Output]]) -> None:
        delivered = []
        with self.lock:  # once for the step's outputs; a sequence cancelled meanwhile is gone: its outputs dropped
            for id, output in outputs:
                if isinstance(output, TokenOutput):
                    sequence = self.unfinished.get(id)
                else:
                    sequence = self._finish(id, Status.FAILED if isinstance(output, ErrorOutput) else Status.FINISHED)
                if sequence is not None:
                    delivered.append((sequence, output))
        for sequence, output in delivered:
            self.deliver_or_cancel(sequence, output)

    def _engine_died(self) -> bool:
        """Fails every sequence and call of the dead engine; starts another unless stopping. True: stop reading."""
        self.process.join(5)
        with self.lock:
            failed = [self._finish(id, Status.FAILED) for id in list(self.unfinished)]
            calls, self.calls = list(self.calls.values()), {}
            stopping = self.stopping
        error = EngineFailed(f"the engine process exited ({self.process.exitcode}) while decoding; retry")
        for sequence in failed:
            self.deliver_or_cancel(sequence, ErrorOutput(error))
        for future in calls:
            settle(future, None, error)
        if stopping:
            return True
        log.error("the engine process of %s exited (%s); starting another", self.name, self.process.exitcode)
        self.stats.failed()
        self.heartbeat.value = -1
        while not self.stopping:
            try:
                self._start()
                with self.lock:
                    if self.stopping:  # stop() came while it loaded: this one stops too (read until it has)
                        self._send(("stop",))
                return False
            except Exception:
                log.exception("restarting the engine process of %s failed; retrying", self.name)
                time.sleep(1)
        return True


def settle(future: asyncio.Future, result, error: Exception | None) -> None:
    def set_it():
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    try:
        future.get_loop().call_soon_threadsafe(set_it)
    except RuntimeError:
        pass  # its event loop is closed
