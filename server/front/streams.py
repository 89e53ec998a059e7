"""Streams of events started before anyone reads them (so that a refused request is a plain HTTP error, not a
broken stream), several streams as one, and several works as one."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Sequence, TypeVar

Item = TypeVar("Item")
T = TypeVar("T")


async def opened(events: AsyncIterator[Item]) -> AsyncIterator[Item]:
    """`events` with its first item awaited now: validation and queueing errors raise here, before a response has
    started; closing what is returned closes `events`."""
    first = await anext(events)

    async def rest():
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()

    return rest()


async def merged(streams: list[AsyncIterator[Item]]) -> AsyncIterator[tuple[int, Item]]:
    """The items of every stream, each with its stream's index, as they come; the first error ends all of them
    (the other streams are cancelled: their sequences leave the batch)."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(index: int, stream: AsyncIterator[Item]):
        try:
            async for item in stream:
                queue.put_nowait((index, item))
            queue.put_nowait((index, done))
        except Exception as e:
            queue.put_nowait((index, e))

    tasks = [asyncio.ensure_future(pump(i, stream)) for i, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if isinstance(item, Exception):
                raise item
            if item is done:
                running -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def all_or_none(works: Sequence[Awaitable[T]]) -> list[T]:
    """Every work's result, run concurrently, in order; when one fails the others stop too."""
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # one failed: the others stop too
            task.cancel()
