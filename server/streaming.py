"""Helpers every API router uses: cancel work when the client hangs up, server-sent events."""

from __future__ import annotations

import asyncio
import json

from fastapi import Request
from fastapi.responses import Response


async def until_disconnect(request: Request, work):
    """Run `work`; if the client hangs up first, cancel it (its sequences leave the batch)."""
    task = asyncio.ensure_future(work)

    async def disconnected():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    finally:
        task.cancel()
        watch.cancel()


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
