"""A request whose replica died before anything of its answer was sent back goes once more, to another replica,
within the request's timeout; only if that fails too does it end with 503 and Retry-After (`once_more_if_lost`, the
one policy). Two places send requests to replicas, and both follow it: Serve's HTTP proxy (`RetryLostReplica`, which
the proxy loads at start: RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names `proxy_middlewares`, runtime.ray_main sets
it) and a replica forwarding a job for a model it does not hold (runtime.forwarding).

Serve's router marks a replica dead when a request to it fails with its death, so the second attempt goes to a
live one. A stream that started is never sent again (its client has part of it); a request is sent again at most once,
and only one whose work may run twice, as its route declares (api.resending). Serve's proxy alone answers such a
request with a bare 500.

The proxies load one more middleware (`RetryAfterOn503`): Serve's own 503s (no replica of the deployment yet, a
deployment that failed) carry no Retry-After; every 503 a proxy sends does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import EngineFailed
from ..settings import Settings

log = logging.getLogger("ray.serve")  # what Serve writes to its processes' logs
T = TypeVar("T")


class ReplicaLost(EngineFailed):
    """The replica an attempt went to died before anything of its answer was sent back (503, Retry-After)."""


async def once_more_if_lost(attempt: Callable[[asyncio.Timeout | None], Awaitable[T]], timeout_s: float,
                            arrived: float, resendable: Callable[[], bool] = lambda: True) -> T:
    """`attempt(None)`; if it raises ReplicaLost and `resendable()`, `attempt(timeout)` once more, under the
    request's timeout, `timeout_s` from `arrived` (event loop time); the attempt may lift `timeout` once its answer
    starts (a stream may run long: the replica bounds its own work). Raises ReplicaLost when the second is lost too
    or runs late."""
    try:
        return await attempt(None)
    except ReplicaLost:
        if not resendable():
            raise
        retried_at = time.monotonic()
    try:
        async with asyncio.timeout_at(arrived + timeout_s) as timeout:
            result = await attempt(timeout)
    except TimeoutError:
        raise ReplicaLost("the replica serving this request died, and its retry did not answer in time; "
                          "retry") from None
    log.info("a request whose replica died was answered by another, %.1f s later", time.monotonic() - retried_at)
    return result


class RetryLostReplica:
    """ASGI middleware around Serve's HTTP proxy, which sends nothing back when a request's replica dies.
    `timeout_s`: the request's timeout (Settings.request_timeout_s); `settings`: the app's, whose routes say what
    may be sent again."""

    def __init__(self, app, timeout_s: float, settings: Settings | None = None):
        self.app, self.timeout_s, self.settings = app, timeout_s, settings or Settings()

    @functools.cached_property
    def resending(self):
        """The routes' rule (api.resending), made at the first lost replica: it imports the app's modules."""
        from ..api.app import resending

        return resending(self.settings)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrived = asyncio.get_running_loop().time()
        received, position, disconnected = [], 0, False

        async def request_message():  # an attempt's: replayed from the record, then read (and recorded)
            nonlocal position, disconnected
            if position < len(received):
                message = received[position]
            else:
                message = await receive()
                disconnected = disconnected or message["type"] == "http.disconnect"
                if not disconnected:
                    received.append(message)
            position += 1
            return message

        async def attempt(timeout: asyncio.Timeout | None) -> None:
            nonlocal position
            position = 0
            if not await self.answered(scope, request_message, send, timeout) and not disconnected:
                raise ReplicaLost("the replica serving this request died; retry")

        try:
            await once_more_if_lost(attempt, self.timeout_s, arrived, lambda: self.resending.allows(scope))
        except ReplicaLost as error:
            if not disconnected:  # else nobody is there to answer
                from ..api.app import render
                from ..api.errors import route_path

                await render(route_path(scope), error)(scope, receive, send)

    async def answered(self, scope, receive, send, timeout: asyncio.Timeout | None) -> bool:
        """One attempt through the proxy; False when nothing was sent back. Lifts `timeout` once the answer starts."""
        started = False

        async def watched(message):
            nonlocal started
            if not started and message["type"] == "http.response.start":
                started = True
                if timeout is not None:
                    timeout.reschedule(None)
            await send(message)

        try:
            await self.app(dict(scope), receive, watched)  # a copy: the proxy rewrites its path for the replica
        except Exception:
            if started:
                raise
        return started


class RetryAfterOn503:
    """ASGI middleware around Serve's HTTP proxy: a 503 without Retry-After (Serve's own) gets the server's."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def with_retry_after(message):
            if message["type"] == "http.response.start" and message["status"] == 503 and not any(
                    name.lower() == b"retry-after" for name, _ in message.get("headers", [])):
                retry_after = str(EngineFailed.retry_after_s).encode()
                message = {**message, "headers": [*message.get("headers", []), (b"retry-after", retry_after)]}
            await send(message)

        await self.app(scope, receive, with_retry_after if scope["type"] == "http" else send)


def proxy_middlewares() -> list:
    """Serve's HTTP proxies call this at start (RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names it)."""
    from starlette.middleware import Middleware

    settings = Settings.from_env()
    return [Middleware(RetryAfterOn503),
            Middleware(RetryLostReplica, timeout_s=settings.request_timeout_s, settings=settings)]
