"""What Serve's HTTP proxy does with a request whose replica died before it answered: it sends it once more, to
another replica, and answers 503 with Retry-After only if that fails too.

Serve's proxy alone answers such a request with a bare 500 (nothing sent: the proxy keeps ActorDiedError to
itself). Its router has then marked the dead replica as such, so the second attempt goes to a live one. Only a
request that has had nothing sent back is sent again (a stream that started cannot be resumed), only once, and
only within the request's timeout, counted from its arrival. The proxy loads this middleware at start
(RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names `proxy_middlewares`, runtime.ray_main sets it).
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("ray.serve")  # the proxy's log


class RetryLostReplica:
    """ASGI middleware around Serve's proxy. `timeout_s`: the request's timeout (Settings.request_timeout_s)."""

    def __init__(self, app, timeout_s: float):
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        received, disconnected = [], False

        async def recorded():  # the request's messages, kept to replay them to the second attempt
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or message["type"] == "http.disconnect"
            if not disconnected:
                received.append(message)
            return message

        if await self.answered(scope, recorded, send) or disconnected:
            return
        retried_at = time.monotonic()
        replayed = list(received)

        async def replay():
            return replayed.pop(0) if replayed else await recorded()

        try:
            async with asyncio.timeout_at(deadline) as timeout:
                if await self.answered(scope, replay, send, timeout):
                    log.info("%s %s: its replica died; answered by another after %.1f s", scope["method"],
                             scope["path"], time.monotonic() - retried_at)
                    return
        except TimeoutError:
            pass
        if disconnected:  # the client left: nobody to answer
            return
        from ..api.app import render
        from ..api.errors import route_path
        from ..errors import EngineFailed

        error = EngineFailed("the replica serving this request died, and so did its retry or it ran out of time; "
                             "retry")
        await render(route_path(scope), error)(scope, receive, send)

    async def answered(self, scope, receive, send, timeout: asyncio.Timeout | None = None) -> bool:
        """One attempt through the proxy; False when its replica died before anything was sent back. Once the
        answer starts, `timeout` no longer applies (the replica bounds its own work; a stream may run long)."""
        started = False

        async def watched(message):
            nonlocal started
            if not started and message["type"] == "http.response.start":
                started = True
                if timeout is not None:
                    timeout.reschedule(None)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            if started:
                raise
        return started


def proxy_middlewares() -> list:
    """Serve's HTTP proxies call this at start (RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names it)."""
    from starlette.middleware import Middleware

    from ..settings import Settings

    return [Middleware(RetryLostReplica, timeout_s=Settings.from_env().request_timeout_s)]
