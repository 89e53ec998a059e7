"""Per-sequence state shared by the scheduler, the engine loop and the service: one source sequence to decode,
its status and its timings. A request (a text cut into sentences, a list of texts) is one or more sequences that
share a `request_id`."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # annotations only: the scheduler's side stays free of torch
    from model import DecodeParams, Hypothesis

_ids = itertools.count(1)


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True)
class TokenOutput:
    token: int


@dataclass(frozen=True)
class FinalOutput:
    hypotheses: list[Hypothesis]


@dataclass(frozen=True)
class ErrorOutput:
    error: Exception


Output = TokenOutput | FinalOutput | ErrorOutput


@dataclass(eq=False)
class Sequence:
    """One source sequence to decode. `deliver` is called from the engine thread and must be thread-safe."""

    source_ids: list[int]
    params: DecodeParams
    deliver: Callable[[Output], None]
    id: int = field(default_factory=lambda: next(_ids))
    request_id: int | None = None  # the request this sequence belongs to (its sentences share one); None: its own id
    stream: bool = True  # deliver each new token (streaming, stop strings); False: only the final output
    status: Status = Status.WAITING
    arrived_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    steps: int = 0  # decoder steps taken (a beam request steps all its beams at once)
    output_tokens: int = 0  # set when finished: tokens of the best hypothesis (see README "output tokens")
    features: Any = None  # an audio window's log-mel features (model.Source.features), encoded instead of source_ids

    def __post_init__(self):
        if self.request_id is None:
            self.request_id = self.id

    @property
    def encoder_input(self):
        """What the encoder takes: the source ids, or an audio window's features."""
        return self.source_ids if self.features is None else self.features

    @property
    def source_length(self) -> int:
        """What it adds to the padded encoder batch: its ids, or an audio window's feature frames."""
        return len(self.source_ids) if self.features is None else self.features.shape[-1]

    @property
    def rows(self) -> int:
        return self.params.rows

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.CANCELLED, Status.FAILED)
