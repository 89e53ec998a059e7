"""ASGI middleware of the app: the body guard, request metrics, and LibreTranslate's CORS. Plain ASGI, not
Starlette's BaseHTTPMiddleware, which costs a task and a stream per request."""

from __future__ import annotations

import time
from typing import Callable

from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from .. import metrics
from ..errors import BadBody, BodyTooLarge, ServerError
from .errors import route_path


class BodyGuard:
    """Reads request bodies up to a byte limit (413) and rejects invalid UTF-8 (400, except in multipart bodies,
    which carry files) before any parsing; the app then receives the buffered body. `max_bytes(path)`: the limit of
    a request's path (audio routes take larger files); `render` writes an error in the shape of the API that owns
    the request's path."""

    def __init__(self, app, max_bytes: Callable[[str], int], render: Callable[[str, ServerError], Response]):
        self.app, self.max_bytes, self.render = app, max_bytes, render

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size, limit = [], 0, self.max_bytes(route_path(scope))
        declared = dict(scope["headers"]).get(b"content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            return await self.render(route_path(scope), self._too_large(limit))(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return await self.render(route_path(scope), self._too_large(limit))(scope, receive, send)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if not dict(scope["headers"]).get(b"content-type", b"").lower().startswith(b"multipart/"):
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as e:
                error = BadBody(f"the body is not valid UTF-8 (byte {e.start})", field="body")
                return await self.render(route_path(scope), error)(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    def _too_large(limit: int) -> BodyTooLarge:
        return BodyTooLarge(f"the body is larger than {limit} bytes", field="body", limit=limit)


class RequestMetrics:
    """Counts requests by route template and status, and observes their latency. Requests rejected before routing
    keep their path if it is a route."""

    def __init__(self, app, paths: Callable[[], set[str]]):
        self.app, self.paths = app, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, recorded = time.monotonic(), False

        def record(status: int) -> None:
            nonlocal recorded
            recorded = True
            route = scope.get("route")
            path = route.path if route is not None else (scope["path"] if scope["path"] in self.paths() else "other")
            metrics.REQUESTS.labels(path, str(status)).inc()
            metrics.REQUEST_LATENCY.labels(path).observe(time.monotonic() - start)

        async def send_recorded(message):
            if message["type"] == "http.response.start":
                record(message["status"])  # before the client can see the response (and scrape /metrics)
            await send(message)

        try:
            await self.app(scope, receive, send_recorded)
        finally:
            if not recorded:  # an unhandled error: the outermost handler answers 500
                record(500)


class ScopedCORS:
    """CORS on the paths `owns` accepts only (LibreTranslate's, as LibreTranslate allows any origin): preflights
    answered, and every response says `Access-Control-Allow-Origin: *`, with or without an Origin header (as
    flask-cors sends it)."""

    def __init__(self, app, owns: Callable[[str], bool]):
        self.app, self.owns = app, owns
        self.cors = CORSMiddleware(app, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.owns(route_path(scope)):
            return await self.app(scope, receive, send)

        async def any_origin(message):
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault("Access-Control-Allow-Origin", "*")
            await send(message)

        await self.cors(scope, receive, any_origin)
