"""Decoding a request's sequences (a document's sentences, a list of texts) through a model's engine, a window at
a time, as one request to the scheduler."""

from __future__ import annotations

import asyncio
from model import DecodeParams, Hypothesis, Source

from ..engine.loop import EngineHandle
from ..engine.sequence import ErrorOutput
from ..errors import QueueFull


async def decode_all(engine: EngineHandle, sources: list[Source], params: DecodeParams,
                     window: int) -> list[list[Hypothesis]]:
    """Every source's hypotheses, in order. At most `window` of them are in the engine at once (twice the batch
    rows keeps the rows from waiting for the event loop, and a long document from filling the queue), all one
    request to the scheduler, their final outputs in one queue. Cancelled (a timeout, a hang-up), the unfinished
    ones leave the engine together."""
    results: list[list[Hypothesis] | None] = [None] * len(sources)
    finals: asyncio.Queue = asyncio.Queue()  # (sequence, its final output), from every window
    unfinished, request_id, next_source = {}, None, 0  # unfinished: sequence → its source's index
    try:
        while next_source < len(sources) or unfinished:
            batch = sources[next_source:next_source + window - len(unfinished)]
            try:
                added = engine.submit([(s.ids, s.decode_params(params)) for s in batch], request_id, stream=False,
                                      into=finals, features=[s.features for s in batch]) if batch else []
            except QueueFull:
                if not unfinished:
                    raise
                added = []  # others' requests fill the queue: retry when one of ours finishes
            for sequence, _ in added:
                unfinished[sequence] = next_source
                request_id, next_source = sequence.request_id, next_source + 1
            sequence, output = await finals.get()  # final outputs only (stream=False)
            if isinstance(output, ErrorOutput):
                raise output.error
            results[unfinished.pop(sequence)] = output.hypotheses
        return results
    finally:
        engine.cancel(*unfinished)  # all at once: none of them admitted while the others leave
