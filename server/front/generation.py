"""Generation's one door, as dispatch.translate is translation's: a request's jobs (one a text) checked against the
limits, their model picked, `per_text` choices made of each (OpenAI's n), and the caller charged inside.

    results = await generation.generate(provider, jobs, model, per_text, spending)   # every job's result
    stream = await generation.stream(provider, jobs, model, per_text, spending)      # every job's events, merged
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import AsyncIterator, Sequence

from ..domain import GenerationJob, GenerationResult, StreamEvent
from . import dispatch
from .provider import ModelProvider
from .streams import all_or_none, merged, opened


def _choices(jobs: Sequence[GenerationJob], per_text: int) -> list[GenerationJob]:
    """`per_text` choices of each job, job by job; a seeded job's choices are seeded one apart, so that they differ
    and each repeats with its seed. Made once the limits hold: n is not bounded before."""
    def seeded(job: GenerationJob, choice: int) -> GenerationJob:
        seed = job.options.seed
        return job if seed is None else replace(job, options=replace(job.options, seed=(seed + choice) % 2**63))

    return [seeded(job, choice) for job in jobs for choice in range(per_text)]


async def generate(provider: ModelProvider, jobs: Sequence[GenerationJob], model: str | None = None,
                   per_text: int = 1, spending: AbstractAsyncContextManager = nullcontext()) -> list[GenerationResult]:
    """Every choice's result, job by job; `spending` (the caller's charge, front.access.Keys.spending) is entered once
    the limits hold and spans the work, refunded if it fails."""
    service = await dispatch.generator(provider, jobs, model, per_text)
    async with spending:
        return await all_or_none([service.generate(job) for job in _choices(jobs, per_text)])


@dataclass(frozen=True)
class Stream:
    model: str
    events: AsyncIterator[tuple[int, StreamEvent]]  # (the choice's index, its event), as they come


async def stream(provider: ModelProvider, jobs: Sequence[GenerationJob], model: str | None = None,
                 per_text: int = 1, spending: AbstractAsyncContextManager = nullcontext()) -> Stream:
    """Every choice's events, merged; opened (the first event awaited) inside the charge, so that a request refused or
    not queued is a plain HTTP error and costs nothing. Closing `events` stops every choice."""
    service = await dispatch.generator(provider, jobs, model, per_text)
    async with spending:
        choices = _choices(jobs, per_text)
        return Stream(service.name, await opened(merged([service.generate_events(job) for job in choices])))
