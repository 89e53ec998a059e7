"""What the routes' handlers find beside their request: the app's state (the models, the settings, keys and
limits, translated files waiting for download) and, on the native routes, the caller.

Plain functions of the request, and on an open server no dependency at all: FastAPI resolves each dependency of
a route on every request, which cost the HTTP process a measurable share of its CPU per request
(loadtests/README.md, serving path)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import Request

from ..errors import Unauthorized
from ..front import ModelProvider
from ..settings import Settings
from .downloads import Downloads
from .keys import Keys


@dataclass(frozen=True)
class AppState:
    provider: ModelProvider
    settings: Settings
    keys: Keys  # keys, rate limits and quotas: one set for all the APIs
    downloads: Downloads  # LibreTranslate's translated files
    started: int = field(default_factory=lambda: int(time.time()))  # when the app was made (Unix seconds)


def served(request: Request) -> AppState:
    return request.app.state.served


async def authorize(request: Request) -> None:
    """The native routes' dependency where keys or limits are configured: the caller (Keys.caller) from
    `Authorization: Bearer <key>` (401 without a valid one), before the body is validated; a work request (a
    POST) counts against its rate limit."""
    keys = served(request).keys
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    caller = keys.caller(key if scheme.lower() == "bearer" else None, request.client and request.client.host)
    if caller is None:
        raise Unauthorized("a valid API key is required: Authorization: Bearer <key>", field="authorization")
    if request.method == "POST":
        await keys.admit(caller)
    request.state.caller = caller


def caller(request: Request) -> str | None:
    """Who called a native route (set by authorize); None on an open server, which counts nothing."""
    return getattr(request.state, "caller", None)
