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
Backpressure stays synchronous: the sequences sent and not yet admitted or cancelled are counted in shared
memory, so `submit` raises QueueFull at once, as in one process. A heartbeat in shared memory tells health how
recently the loop progressed. If the engine process dies (killed, out of memory), its requests fail with
EngineFailed (503) and another is started; the server stays up.
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
from ..errors import EngineFailed, QueueFull
from ..metrics import EngineStats, record
from ..settings import Settings
from .engine_child import serve_engine

log = logging.getLogger(__name__)


class EngineProcess(EngineHandle):
    """The engine of the model at `path` in a child process, `settings` limited to the model. Blocks until the
    child has loaded the model (its load errors are raised here)."""

    def __init__(self, path: str | None, settings: Settings, name: str, threads: int):
        super().__init__()
        self.path, self.settings, self.name, self.threads = path, settings, name, threads
        self.stats = EngineStats(name)
        self.context = multiprocessing.get_context("spawn")
        self.lock = threading.Lock()  # sequences, calls and the pipe to the engine
        self.sequences: dict[int, Sequence] = {}  # unfinished, by id
        self.calls: dict[int, asyncio.Future] = {}
        self.call_ids = itertools.count()
        self.stopping = False
        self._start()
        self.reader = threading.Thread(target=self._read, name=f"engine-process-{name}", daemon=True)
        self.reader.start()

    def _start(self) -> None:
        """A new engine process, loaded; until it is, sends go to the one before (a dead one: EngineFailed)."""
        queued = self.context.Value("q", 0)  # sequences sent and not yet admitted or cancelled
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
        limit = self.settings.max_waiting_sequences
        with self.lock:  # self.queued: the count of the engine process the sequences go to
            with self.queued.get_lock():  # never held while sending: the engine's admissions take it too
                if self.queued.value + len(sequences) > limit:
                    raise QueueFull(f"the queue holds {self.queued.value} waiting sequences; at most {limit}",
                                    limit=limit)
                self.queued.value += len(sequences)
            if not self._send(("submit", [(r.id, r.request_id, r.source_ids, r.params, r.stream, r.arrived_at)
                                          for r in sequences])):
                with self.queued.get_lock():
                    self.queued.value -= len(sequences)
                raise EngineFailed("the engine process is restarting; retry shortly")
            self.sequences.update((r.id, r) for r in sequences)

    def cancel(self, *sequences: Sequence) -> None:
        with self.lock:
            ids = [r.id for r in sequences if self.sequences.pop(r.id, None) is not None]
            for sequence in sequences:
                if not sequence.done:
                    sequence.status = Status.CANCELLED
            if ids:
                self._send(("cancel", ids))

    async def align(self, inputs: list[AlignmentInput]) -> list:
        future = asyncio.get_running_loop().create_future()
        with self.lock:
            call = next(self.call_ids)
            self.calls[call] = future
            if not self._send(("align", call, inputs)):
                del self.calls[call]
                raise EngineFailed("the engine process is restarting; retry shortly")
        return await future

    def _send(self, message) -> bool:
        """Under self.lock. False when the engine process is gone."""
        try:
            self.to_engine.send(message)
            return True
        except (OSError, ValueError):  # a broken or closed pipe
            return False

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
                final = not isinstance(output, TokenOutput)
                sequence = self.sequences.pop(id, None) if final else self.sequences.get(id)
                if sequence is not None:
                    delivered.append((sequence, output))
        for sequence, output in delivered:
            if not isinstance(output, TokenOutput):
                sequence.status = Status.FAILED if isinstance(output, ErrorOutput) else Status.FINISHED
            try:
                sequence.deliver(output)
            except Exception:  # its event loop is gone
                log.exception("delivering to sequence %s failed; cancelling it", sequence.id)
                self.cancel(sequence)

    def _engine_died(self) -> bool:
        """Fails every sequence and call of the dead engine; starts another unless stopping. True: stop reading."""
        self.process.join(5)
        with self.lock:
            sequences, self.sequences = list(self.sequences.values()), {}
            calls, self.calls = list(self.calls.values()), {}
            stopping = self.stopping
        error = EngineFailed(f"the engine process exited ({self.process.exitcode}) while decoding; retry")
        for sequence in sequences:
            sequence.status = Status.FAILED
            try:
                sequence.deliver(ErrorOutput(error))
            except Exception:
                pass  # its event loop is gone too
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
