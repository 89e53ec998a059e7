"""What the routes' handlers are given: the app's state (the models, the settings, keys and limits, translated files
waiting for download) and, on the native routes, the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

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


async def app_state(request: Request) -> AppState:
    return request.app.state.served


async def bearer_caller(request: Request) -> str:
    """The native APIs' caller (Keys.caller) from `Authorization: Bearer <key>` (401 without a valid one); a work
    request (a POST) counts against its rate limit."""
    keys = request.app.state.served.keys
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    caller = keys.caller(key if scheme.lower() == "bearer" else None, request.client and request.client.host)
    if caller is None:
        raise Unauthorized("a valid API key is required: Authorization: Bearer <key>", field="authorization")
    if request.method == "POST":
        keys.admit(caller)
    return caller


State = Annotated[AppState, Depends(app_state)]
Caller = Annotated[str, Depends(bearer_caller)]
