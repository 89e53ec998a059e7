"""The scheduler decides each step which waiting sequences join the running batch, and what a step's results
mean for each sequence. It holds no tensors and imports neither torch nor FastAPI.

Contract (after vLLM's): `schedule()` → Plan (sequences to admit, running sequences to drop); the engine
executes the plan and one decoder step; `update(events, now)` turns the step's events into per-sequence
outputs (tokens, finished hypotheses) and retires finished sequences.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

from ..errors import QueueFull, ServerError
from .sequence import ErrorOutput, FinalOutput, Output, Sequence, Status, TokenOutput


class StepReport(Protocol):
    """What the engine reports per sequence after a step (model.StepEvent has this shape)."""

    key: Hashable
    new_token: int | None
    results: list | None
    error: Exception | None  # choosing this sequence's next tokens raised: it fails alone


@dataclass
class Plan:
    admit: list[Sequence] = field(default_factory=list)
    cancel: list[Sequence] = field(default_factory=list)


@dataclass
class Update:
    """What one step produced: outputs to deliver, sequences that took their first step, sequences finished."""

    outputs: list[tuple[Sequence, Output]] = field(default_factory=list)
    first_step: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)


class Scheduler:
    def __init__(self, max_rows: int, max_batch_tokens: int, max_waiting: int | None,
                 max_request_share: float = 1.0, left_waiting: Callable[[int], None] = lambda count: None):
        """`max_waiting`: sequences that may wait (None: no limit here, the caller counts them). `left_waiting(n)`:
        told whenever n sequences leave the waiting queue, admitted or cancelled (a caller that counts them gives
        their places back there: runtime.engine_child)."""
        self.max_rows, self.max_batch_tokens, self.max_waiting = max_rows, max_batch_tokens, max_waiting
        self.left_waiting = left_waiting
        # rows one request (its sequences: a document's sentences) may hold while other requests hold rows too
        self.shared_cap = max(1, int(max_rows * max_request_share))
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}
        self.to_cancel: list[Sequence] = []

    @property
    def rows_in_use(self) -> int:
        return sum(r.rows for r in self.running.values())

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.to_cancel)

    def add(self, sequences: list[Sequence]) -> None:
        """Queue all of `sequences` or none of them."""
        limit = self.max_waiting
        if limit is not None and len(self.waiting) + len(sequences) > limit:
            raise QueueFull(f"the queue holds {len(self.waiting)} waiting sequences; at most {limit}", limit=limit)
        self.waiting.extend(sequences)

    def find(self, id: int) -> Sequence | None:
        """The unfinished sequence with this id, waiting or running; None once it has finished or left."""
        return self.running.get(id) or next((s for s in self.waiting if s.id == id), None)

    def cancel(self, sequence: Sequence) -> None:
        if sequence.status == Status.WAITING:
            self.waiting.remove(sequence)
            sequence.status = Status.CANCELLED
            self.left_waiting(1)
        elif sequence.status == Status.RUNNING and sequence not in self.to_cancel:
            self.to_cancel.append(sequence)

    def schedule(self) -> Plan:
        """Admit while rows and the padded encoder batch (sequences × longest source) fit. Next in line is the
        oldest waiting sequence of the request holding the fewest rows, so a one-sentence request that arrives
        while a document fills the batch takes the first row that frees; within a request, first come first
        served. While other requests hold rows, a request that holds rows already grows only up to its share
        (`max_request_share` of the rows): a document then leaves the batch small enough for the others' steps to
        stay fast (alone, it takes every row). Admission stops at the first sequence that does not fit: nothing
        skips ahead of it."""
        # A sequence may have finished in the step during which it was cancelled: nothing left to drop.
        plan = Plan(cancel=[s for s in self.to_cancel if self.running.pop(s.id, None) is not None])
        self.to_cancel = []
        for sequence in plan.cancel:
            sequence.status = Status.CANCELLED
        held = Counter()
        for sequence in self.running.values():
            held[sequence.request_id] += sequence.rows
        free_rows = self.max_rows - sum(held.values())
        longest = 0
        while self.waiting:
            sequence = self._least_served(held)
            padded = (len(plan.admit) + 1) * max(longest, sequence.source_length)
            if sequence.rows > free_rows or (plan.admit and padded > self.max_batch_tokens):
                break
            own = held[sequence.request_id]
            if own and own + sequence.rows > self.shared_cap and sum(held.values()) > own:
                break  # at its share while others decode (least served first: nobody else waiting holds fewer)
            self.waiting.remove(sequence)
            plan.admit.append(sequence)
            free_rows -= sequence.rows
            held[sequence.request_id] += sequence.rows
            longest = max(longest, sequence.source_length)
            sequence.status = Status.RUNNING
            self.running[sequence.id] = sequence
        if plan.admit:
            self.left_waiting(len(plan.admit))
        return plan

    def _least_served(self, held: Counter) -> Sequence:
        """The oldest waiting sequence of the request holding the fewest rows (the oldest request on a tie)."""
        best, seen = None, set()
        for sequence in self.waiting:
            if sequence.request_id in seen:
                continue
            seen.add(sequence.request_id)
            if best is None or held[sequence.request_id] < held[best.request_id]:
                best = sequence
                if held[best.request_id] == 0:
                    break  # nobody holds fewer
        return best

    def update(self, events: list[StepReport], now: float) -> Update:
        """A step's events → outputs per sequence; finished sequences leave `running`."""
        update = Update()
        for event in events:
            sequence = self.running.get(event.key)
            if sequence is None:  # cancelled while the step ran
                continue
            if sequence.first_token_at is None:
                sequence.first_token_at = now
                update.first_step.append(sequence)
            sequence.steps += 1
            if event.error is not None:
                self.finish(sequence, Status.FAILED)
                failure = ServerError(f"decoding this text failed: {event.error}")  # a 500: a retry would fail too
                update.outputs.append((sequence, ErrorOutput(failure)))
                continue
            if event.new_token is not None and sequence.stream:
                update.outputs.append((sequence, TokenOutput(event.new_token)))
            if event.results is not None:
                self.finish(sequence)
                sequence.output_tokens = len(event.results[0].token_ids)
                update.finished.append(sequence)
                update.outputs.append((sequence, FinalOutput(event.results)))
        return update

    def finish(self, sequence: Sequence, status: Status = Status.FINISHED) -> None:
        self.running.pop(sequence.id, None)
        sequence.status = status
