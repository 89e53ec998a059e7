"""The engine loop: a background thread per replica runs scheduler → engine steps; asyncio submits and awaits.

Requests are delivered back to the event loop with call_soon_threadsafe. A failed step fails the requests in
the batch (never the whole server); a heartbeat tells readiness and health whether the loop is progressing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import AsyncIterator

from model import DecodeParams

from . import metrics
from .engine import Engine
from .errors import EngineFailed
from .request import ErrorOutput, FinalOutput, Output, SeqRequest, Status, TokenOutput
from .scheduler import Scheduler

log = logging.getLogger(__name__)


class EngineLoop:
    def __init__(self, engine: Engine, scheduler: Scheduler):
        self.engine, self.scheduler = engine, scheduler
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

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def seconds_since_progress(self) -> float:
        return time.monotonic() - self.heartbeat

    # ---- asyncio side -------------------------------------------------------------------------------------
    def submit(self, sources: list[tuple[list[int], DecodeParams]]) -> list[tuple[SeqRequest, asyncio.Queue]]:
        """Queue one sequence per (source ids, params) (all or none: QueueFull); each gets a queue of its
        outputs."""
        loop = asyncio.get_running_loop()
        out = []
        for ids, params in sources:
            queue: asyncio.Queue[Output] = asyncio.Queue()
            out.append((SeqRequest(ids, params, lambda o, q=queue: loop.call_soon_threadsafe(q.put_nowait, o)),
                        queue))
        with self.lock:
            self.scheduler.add([r for r, _ in out])
            metrics.WAITING.set(len(self.scheduler.waiting))
            self.lock.notify()
        return out

    def cancel(self, request: SeqRequest) -> None:
        with self.lock:
            if not request.done:
                self.scheduler.cancel(request)
                metrics.WAITING.set(len(self.scheduler.waiting))
                self.lock.notify()

    async def outputs(self, request: SeqRequest, queue: asyncio.Queue) -> AsyncIterator[Output]:
        """Outputs of one sequence until its final one; cancelling the consumer cancels the sequence."""
        try:
            while True:
                output = await queue.get()
                yield output
                if not isinstance(output, TokenOutput):
                    return
        finally:
            self.cancel(request)

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
                self._record_admission(plan.admit)
            start = time.monotonic()
            try:
                events = self.engine.execute(plan)
            except Exception as e:  # a bug or an out-of-memory: fail this batch, keep serving
                log.exception("engine step failed")
                self._fail_running(e)
                continue
            self._deliver(events)
            metrics.STEP_TIME.observe(time.monotonic() - start)
            metrics.BATCH_ROWS.observe(self.engine.rows_in_use)
            self.heartbeat = time.monotonic()

    def _record_admission(self, admitted: list[SeqRequest]) -> None:
        now = time.monotonic()
        for request in admitted:
            metrics.QUEUE_WAIT.observe(now - request.arrived_at)
        metrics.WAITING.set(len(self.scheduler.waiting))

    def _deliver(self, events) -> None:
        now = time.monotonic()
        with self.lock:
            for event in events:
                request = self.scheduler.running.get(event.key)
                if request is None:  # cancelled while the step ran
                    continue
                if request.first_token_at is None:
                    request.first_token_at = now
                    metrics.TIME_TO_FIRST_TOKEN.observe(now - request.arrived_at)
                request.output_tokens += 1
                if event.new_token is not None:
                    request.deliver(TokenOutput(event.new_token))
                if event.results is not None:
                    self.scheduler.finish(request)
                    self._record_finish(request, now)
                    request.deliver(FinalOutput(event.results))
            metrics.RUNNING.set(len(self.scheduler.running))
            metrics.KV_ROWS_USED.set(self.engine.rows_in_use)

    def _record_finish(self, request: SeqRequest, now: float) -> None:
        metrics.INPUT_TOKENS.inc(len(request.source_ids))
        metrics.OUTPUT_TOKENS.inc(request.output_tokens)
        if request.output_tokens > 1:
            metrics.TIME_PER_OUTPUT_TOKEN.observe((now - request.first_token_at) / (request.output_tokens - 1))

    def _fail_running(self, error: Exception) -> None:
        metrics.ENGINE_FAILURES.inc()
        with self.lock:
            failed = list(self.scheduler.running.values())
            for request in failed:
                self.scheduler.finish(request, Status.FAILED)
                request.deliver(ErrorOutput(EngineFailed(f"the engine failed while decoding: {error}")))
            self.engine.reset()
            metrics.RUNNING.set(0)
            metrics.KV_ROWS_USED.set(0)
        self.heartbeat = time.monotonic()
