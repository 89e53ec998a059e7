"""Helpers every API router uses: cancel work when the client hangs up, server-sent events, one JSON answer, a file
to save."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel


async def until_disconnect(request: Request, work):
    """Await `work` in this task; if the client hangs up first, a watcher cancels it (its sequences leave the
    batch) and the answer is 499. One task per request besides the handler's own (a task for the work and
    asyncio.wait over both cost the event loop more)."""
    current, hung_up = asyncio.current_task(), False

    async def disconnected():
        nonlocal hung_up
        while (await request.receive())["type"] != "http.disconnect":
            pass
        hung_up = True
        current.cancel()

    watch = asyncio.ensure_future(disconnected())
    try:
        return await work
    except asyncio.CancelledError:
        if not hung_up:
            raise
        current.uncancel()
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    finally:
        watch.cancel()


def json_response(body: BaseModel) -> Response:
    """`body` serialized once, None fields left out as the routes' response_model_exclude_none asks. (A route that
    returns the model itself has FastAPI validate it against the response model again, then serialize it.)"""
    return Response(body.model_dump_json(exclude_none=True), media_type="application/json")


DONE = "data: [DONE]\n\n"


def event_response(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def attachment(content: bytes, filename: str, media_type: str = "application/octet-stream") -> Response:
    """A file to save as `filename` (quoted: no quotes or line breaks reach the header)."""
    return Response(content, media_type=media_type,
                    headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}"})
