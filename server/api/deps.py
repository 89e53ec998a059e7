"""What the routes' handlers find beside their request: the app's state (the models, the settings, keys and
limits, translated files waiting for download, glossaries) and the caller, from the key as each API sends it.

Plain functions of the request, and on an open server no dependency at all: FastAPI resolves each dependency of
a route on every request, which cost the HTTP process a measurable share of its CPU per request
(loadtests/README.md, serving path)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from ..errors import ServerError, Unauthorized
from ..front import ModelProvider
from ..front.access import Keys
from ..front.document_jobs import DocumentJobs
from ..front.downloads import Downloads
from ..front.glossaries import Glossaries
from ..settings import Settings
from .errors import InvalidKey
from .reading import Params


@dataclass(frozen=True)
class AppState:
    provider: ModelProvider
    settings: Settings
    keys: Keys  # keys, rate limits and quotas: one set for all the APIs
    downloads: Downloads  # LibreTranslate's translated files
    glossaries: Glossaries  # every API's, in one store
    jobs: DocumentJobs  # document jobs: every API's document routes
    started: int = field(default_factory=lambda: int(time.time()))  # when the app was made (Unix seconds)


def served(request: Request) -> AppState:
    return request.app.state.served


@dataclass(frozen=True)
class KeySending:
    """How an API's clients send their key: `Authorization: <scheme> <key>`, else the parameter `parameter` (body or
    query string); and the error (`error`, naming `field`, saying `rejected`) the API answers without a valid one."""

    scheme: str | None
    parameter: str | None
    rejected: str
    error: type[ServerError] = InvalidKey
    field: str = "api_key"

    def key(self, request: Request, params: Params | None) -> Any:
        if self.scheme is not None:
            scheme, _, key = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == self.scheme:
                return key.strip()
        return params.first(self.parameter) if self.parameter and params is not None else None


async def caller_of(request: Request, sending: KeySending, params: Params | None = None, work: bool = False) -> str:
    """Who is calling (see Keys.caller), from the key as the API sends it; an empty key is no key. A `work` request
    (one that translates, detects or generates) counts against the caller's rate limit."""
    keys = served(request).keys
    key = sending.key(request, params)
    caller = keys.caller(key if isinstance(key, str) and key else None, request.client and request.client.host)
    if caller is None:
        raise sending.error(sending.rejected, field=sending.field)
    if work:
        await keys.admit(caller)
    return caller


BEARER = KeySending("bearer", None, "a valid API key is required: Authorization: Bearer <key>", Unauthorized,
                    "authorization")


async def authorize(request: Request) -> None:
    """The native routes' dependency where keys or limits are configured: the caller from `Authorization: Bearer
    <key>` (401 without a valid one), before the body is validated; a work request (a POST) counts against its rate
    limit."""
    request.state.caller = await caller_of(request, BEARER, work=request.method == "POST")


def caller(request: Request) -> str | None:
    """Who called a native route (set by authorize); None on an open server, which counts nothing."""
    return getattr(request.state, "caller", None)
