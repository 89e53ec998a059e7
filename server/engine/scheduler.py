"""The scheduler decides each step which waiting requests join the running batch, and what a step's results
mean for each request. It holds no tensors and imports neither torch nor FastAPI.

Contract (after vLLM's): `schedule()` → Plan (requests to admit, running requests to drop); the engine
executes the plan and one decoder step; `update(events, now)` turns the step's events into per-request
outputs (tokens, finished hypotheses) and retires finished requests.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Hashable, Protocol

from .errors import QueueFull
from .request import FinalOutput, Output, SeqRequest, Status, TokenOutput


class StepEvent(Protocol):
    """What the engine reports per request after a step (model.StepEvent has this shape)."""

    key: Hashable
    new_token: int | None
    results: list | None


@dataclass
class Plan:
    admit: list[SeqRequest] = field(default_factory=list)
    cancel: list[SeqRequest] = field(default_factory=list)


@dataclass
class Update:
    """What one step produced: outputs to deliver, requests that took their first step, requests finished."""

    outputs: list[tuple[SeqRequest, Output]] = field(default_factory=list)
    first_step: list[SeqRequest] = field(default_factory=list)
    finished: list[SeqRequest] = field(default_factory=list)


class Scheduler:
    def __init__(self, max_rows: int, max_batch_tokens: int, max_queued: int, max_request_share: float = 1.0):
        self.max_rows, self.max_batch_tokens, self.max_queued = max_rows, max_batch_tokens, max_queued
        # rows one request (a group: a document's sentences) may hold while other requests hold rows too
        self.shared_cap = max(1, int(max_rows * max_request_share))
        self.waiting: deque[SeqRequest] = deque()
        self.running: dict[int, SeqRequest] = {}
        self.to_cancel: list[SeqRequest] = []

    @property
    def rows_in_use(self) -> int:
        return sum(r.rows for r in self.running.values())

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.to_cancel)

    def add(self, requests: list[SeqRequest]) -> None:
        """Queue all of `requests` or none of them."""
        if len(self.waiting) + len(requests) > self.max_queued:
            raise QueueFull(f"the queue holds {len(self.waiting)} waiting sequences; at most {self.max_queued}",
                            limit=self.max_queued)
        self.waiting.extend(requests)

    def cancel(self, request: SeqRequest) -> None:
        if request.status == Status.WAITING:
            self.waiting.remove(request)
            request.status = Status.CANCELLED
        elif request.status == Status.RUNNING and request not in self.to_cancel:
            self.to_cancel.append(request)

    def schedule(self) -> Plan:
        """Admit while rows and the padded encoder batch (group size × longest source) fit. Next in line is the
        oldest waiting sequence of the group (request) holding the fewest rows, so a one-sentence request that
        arrives while a document fills the batch takes the first row that frees; within a group, first come
        first served. While other requests hold rows, a request that holds rows already grows only up to its share
        (`max_request_share` of the rows): a document then leaves the batch small enough for the others' steps to
        stay fast (alone, it takes every row). Admission stops at the first sequence that does not fit: nothing
        skips ahead of it."""
        # A request may have finished in the step during which it was cancelled: nothing left to drop.
        plan = Plan(cancel=[r for r in self.to_cancel if self.running.pop(r.id, None) is not None])
        self.to_cancel = []
        for request in plan.cancel:
            request.status = Status.CANCELLED
        held = Counter()
        for request in self.running.values():
            held[request.group] += request.rows
        free_rows = self.max_rows - sum(held.values())
        longest = 0
        while self.waiting:
            request = self._least_served(held)
            padded = (len(plan.admit) + 1) * max(longest, len(request.source_ids))
            if request.rows > free_rows or (plan.admit and padded > self.max_batch_tokens):
                break
            own = held[request.group]
            if own and own + request.rows > self.shared_cap and sum(held.values()) > own:
                break  # at its share while others decode (least served first: nobody else waiting holds fewer)
            self.waiting.remove(request)
            plan.admit.append(request)
            free_rows -= request.rows
            held[request.group] += request.rows
            longest = max(longest, len(request.source_ids))
            request.status = Status.RUNNING
            self.running[request.id] = request
        return plan

    def _least_served(self, held: Counter) -> SeqRequest:
        """The oldest waiting sequence of the group holding the fewest rows (the oldest group on a tie)."""
        best, seen = None, set()
        for request in self.waiting:
            if request.group in seen:
                continue
            seen.add(request.group)
            if best is None or held[request.group] < held[best.group]:
                best = request
                if held[best.group] == 0:
                    break  # nobody holds fewer
        return best

    def update(self, events: list[StepEvent], now: float) -> Update:
        """A step's events → outputs per request; finished requests leave `running`."""
        update = Update()
        for event in events:
            request = self.running.get(event.key)
            if request is None:  # cancelled while the step ran
                continue
            if request.first_token_at is None:
                request.first_token_at = now
                update.first_step.append(request)
            request.steps += 1
            if event.new_token is not None and request.stream:
                update.outputs.append((request, TokenOutput(event.new_token)))
            if event.results is not None:
                self.finish(request)
                request.output_tokens = len(event.results[0].token_ids)
                update.finished.append(request)
                update.outputs.append((request, FinalOutput(event.results)))
        return update

    def finish(self, request: SeqRequest, status: Status = Status.FINISHED) -> None:
        self.running.pop(request.id, None)
        request.status = status
