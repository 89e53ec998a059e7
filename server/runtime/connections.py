"""What a process serving HTTP itself (`--no-ray` workers, Ray Serve replicas with `replica_http`) does about its
connections, around the app: plain ASGI, one wrapper each.

- **Spread.** Several processes share the port through SO_REUSEPORT and the kernel picks one per new connection; a
  kept-alive connection stays with its process for good. When Serve adds a replica, clients that keep their
  connections would never reach it; when it removes one, they were pinned to it. So a connection is answered
  `Connection: close` once it is older than `max_age_s`, and the client's next connection goes wherever the kernel
  sends it now.
- **Drain.** When the server stops, uvicorn waits drain_timeout_s for requests in flight, then cancels them and
  answers those not yet answered with a bare 500. Here they answer 503 `shutting_down` with Retry-After, in the
  shape of the API the path belongs to: another process may serve them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ..api import render
from ..api.errors import route_path
from ..errors import ShuttingDown

# Long enough that reconnecting costs nothing measurable (one handshake per client per 10 s), short enough that a
# replica Serve adds takes its share within seconds of serving: the upscale delay's time.
MAX_CONNECTION_AGE_S = 10.0


class ConnectionAgeLimit:
    """Closes each kept-alive connection with the first response after it is `max_age_s` old. A connection is known
    by its client address, the only name ASGI gives it; an address the kernel reuses for a new connection is at
    worst closed early once."""

    def __init__(self, app, max_age_s: float = MAX_CONNECTION_AGE_S, clock: Callable[[], float] = time.monotonic):
        self.app, self.max_age_s, self.clock = app, max_age_s, clock
        self.opened: dict[tuple, float] = {}  # client address: when its first request came

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope.get("client"):
            return await self.app(scope, receive, send)
        client, now = tuple(scope["client"]), self.clock()
        opened = self.opened.setdefault(client, now)

        async def closing(message):
            if message["type"] == "http.response.start" and now - opened >= self.max_age_s:
                self.opened.pop(client, None)
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        if len(self.opened) > 4096:  # connections the clients closed: forget those past any age that matters
            self.opened = {c: t for c, t in self.opened.items() if now - t < 2 * self.max_age_s}
        await self.app(scope, receive, closing)


class AnswerCutRequests:
    """A request cancelled while the server drains (`draining()`), before its response started, answers 503
    `shutting_down` with Retry-After rather than uvicorn's 500. Other cancellations pass on untouched."""

    def __init__(self, app, draining: Callable[[], bool]):
        self.app, self.draining = app, draining

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if started or not self.draining():
                raise
            error = ShuttingDown("the server stopped before this request finished; retry")
            await render(route_path(scope), error)(scope, receive, send)
