"""The FastAPI application: routes, request guards, and the one mapping from errors to HTTP responses."""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, Protocol

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import metrics
from .compat import add_deepl_routes, add_libretranslate_routes
from .compat.errors import route_path
from .domain import ModelInfo
from .errors import BadBody, BodyTooLarge, InvalidRequest, ServerError, Unauthorized
from .keys import Keys
from .native import add_native_routes
from .service import ModelService
from .settings import Settings

log = logging.getLogger(__name__)


class ModelProvider(Protocol):
    """Where the app finds models: in-process (server.local) or multiplexed by Ray Serve."""

    async def get(self, name: str | None, source_lang: str | None = None,
                  target_lang: str | None = None) -> ModelService: ...

    def models(self) -> list[ModelInfo]: ...

    async def health(self, stale_after_s: float) -> tuple[bool, str]: ...

    def metrics_text(self) -> bytes: ...


def error_response(error: ServerError) -> JSONResponse:
    """The native error shape: {"error": {"code", "message", "field"?, "limit"?}} with the error's status."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers())


class BodyGuard:
    """ASGI middleware: reads request bodies up to a byte limit (413) and rejects invalid UTF-8 (400, except in
    multipart bodies, which carry files) before any parsing; the app then receives the buffered body. `render`
    writes an error in the shape of the API that owns the request's path."""

    def __init__(self, app, max_bytes: int, render: Callable[[str, ServerError], Response]):
        self.app, self.max_bytes, self.render = app, max_bytes, render

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        declared = dict(scope["headers"]).get(b"content-length")
        if declared and declared.isdigit() and int(declared) > self.max_bytes:
            return await self.render(route_path(scope), self._too_large())(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self.render(route_path(scope), self._too_large())(scope, receive, send)
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

    def _too_large(self) -> BodyTooLarge:
        return BodyTooLarge(f"the body is larger than {self.max_bytes} bytes", field="body", limit=self.max_bytes)


class RequestMetrics:
    """ASGI middleware: counts requests by route template and status, and observes their latency. Plain ASGI,
    not Starlette's BaseHTTPMiddleware, which costs a task and a stream per request (a fifth of the event loop's
    time under load, measured). Requests rejected before routing keep their path if it is a route."""

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


def validation_error(exc: RequestValidationError) -> ServerError:
    """Pydantic/FastAPI validation errors → one JSON error naming the field, the problem and the limit."""
    first = exc.errors()[0]
    if first["type"] in ("json_invalid", "json_type"):
        return BadBody(f"invalid JSON: {first.get('msg', '')}", field="body")
    loc = [str(p) for p in first["loc"] if p != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
    limit = next((v for k, v in (first.get("ctx") or {}).items() if k in ("ge", "gt", "le", "lt", "max_length",
                                                                         "min_length")), None)
    return InvalidRequest(f"{field}: {first['msg']}", field=field, limit=limit)


def text_characters(body: bytes) -> int:
    """Characters in a native request's `text` (a string or a list of strings): what it charges to a quota."""
    try:
        text = json.loads(body).get("text")
    except (ValueError, AttributeError):
        return 0
    texts = [text] if isinstance(text, str) else text if isinstance(text, list) else []
    return sum(len(t) for t in texts if isinstance(t, str))


def create_app(provider: ModelProvider, settings: Settings) -> FastAPI:
    app = FastAPI(title="seq2seq-serve", version="0.1.0",
                  description="Translation and text-to-text generation with encoder-decoder Transformers.")
    compat_styles = []  # the compatible APIs' error styles, each owning its paths (filled in below)

    def render(path: str, error: ServerError) -> Response:
        style = next((style for style in compat_styles if style.owns(path)), None)
        return style.render(error) if style else error_response(error)

    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes, render=render)

    app.add_middleware(RequestMetrics, paths=lambda: paths)

    @app.exception_handler(ServerError)
    async def server_error(_: Request, exc: ServerError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        return error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        # a body the framework could not parse, e.g. one json.loads cannot even decode (NUL bytes, read as UTF-32,
        # are no JSONDecodeError): in the error shape of the API the path belongs to
        if exc.status_code == 400 and request.method == "POST":
            return render(route_path(request.scope), BadBody("the body could not be parsed",
                                                             field="body"))
        return await http_exception_handler(request, exc)  # 404, 405: FastAPI's own answer

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception):
        log.exception("unhandled error")
        return error_response(ServerError(f"internal error: {type(exc).__name__}"))

    keys = Keys(settings)  # keys, rate limits and quotas: one set for all three APIs

    async def authorize(request: Request):
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        caller = keys.caller(key if scheme.lower() == "bearer" else None, request.client and request.client.host)
        if caller is None:
            raise Unauthorized("a valid API key is required: Authorization: Bearer <key>", field="authorization")
        if request.method != "POST":
            yield
            return
        keys.admit(caller)
        with keys.spending(caller, text_characters(await request.body()) if keys.counting else 0):
            yield

    # an open server has nothing to check per request: no dependency (a generator one costs FastAPI an exit stack)
    add_native_routes(app, provider, authorize if keys.enforcing else None, settings)
    compat_styles += [add_libretranslate_routes(app, provider, keys, settings),
                      add_deepl_routes(app, provider, keys, settings)]

    @app.get("/healthz")
    async def healthz():
        ok, detail = await provider.health(settings.health_stale_s)
        return JSONResponse({"status": "ok" if ok else "unhealthy", "detail": detail}, status_code=200 if ok else 503)

    @app.get("/readyz")
    async def readyz():
        ok, detail = await provider.health(settings.ready_stale_s)
        return JSONResponse({"status": "ready" if ok else "not ready", "detail": detail},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics_route():
        return Response(provider.metrics_text(), media_type=CONTENT_TYPE_LATEST)

    paths = {route.path for route in app.routes}
    return app
