"""A request's task cancelled (its client hung up) always cancels its sequences, whenever the cancellation lands
relative to the outputs arriving. (On Python 3.11, asyncio.wait_for around each output dropped a cancellation that
met a ready output, and the request decoded to its end.)"""

import asyncio

import pytest

from model import Hypothesis, demo_model_dir, load
from server.domain import DecodeOptions, GenerationJob
from server.engine.loop import EngineHandle
from server.engine.sequence import FinalOutput, TokenOutput
from server.front import HeldModel, model_limits
from server.settings import Settings

TOKENS = 100


class TokenEveryTurn(EngineHandle):
    """Posts a token to every live sequence on every turn of the event loop; finishes one after 100 tokens."""

    def __init__(self):
        super().__init__()
        self.live, self.cancelled = set(), set()

    def add(self, sequences) -> None:
        for sequence in sequences:
            self.live.add(sequence.id)
            asyncio.get_running_loop().create_task(self._feed(sequence))

    async def _feed(self, sequence) -> None:
        for _ in range(TOKENS):
            if sequence.id not in self.live:
                return
            sequence.deliver(TokenOutput(5))
            await asyncio.sleep(0)
        self.live.discard(sequence.id)
        sequence.deliver(FinalOutput([Hypothesis([5] * TOKENS, 0.0, "length")]))

    def cancel(self, *sequences) -> None:
        for sequence in sequences:
            if sequence.id in self.live:
                self.live.discard(sequence.id)
                self.cancelled.add(sequence.id)


@pytest.fixture(scope="module")
def service():
    bundle = load(demo_model_dir(), weights=False)
    return HeldModel("demo", bundle, model_limits(Settings(dtype="float32"), bundle.max_positions),
                        TokenEveryTurn())


@pytest.mark.parametrize("streaming", [False, True])
def test_a_cancelled_generation_always_leaves_the_engine(service, streaming):
    job = GenerationJob(text="forty-two", target_lang="de", options=DecodeOptions(max_new_tokens=10))

    async def consume():
        if streaming:
            async for _ in service.generate_events(job):
                await asyncio.sleep(0)  # the consumer's own await, as a response writing a chunk
        else:
            await service.generate(job)

    async def trials() -> list[int]:
        kept = []
        for turns in range(1, 41):  # the cancellation lands in every phase of the token rhythm
            task = asyncio.create_task(consume())
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
                kept.append(turns)  # the cancellation was dropped: it decoded to its end
            except asyncio.CancelledError:
                pass
        return kept

    assert asyncio.run(trials()) == []
    assert not service.engine.live  # every sequence submitted was cancelled
