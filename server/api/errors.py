"""Errors in each API's shape: the native `{"error": {code, message, field?, limit?}}`, LibreTranslate's
`{"error": message}`, DeepL's `{"message": message}`, OpenAI's `{"error": {message, type, param, code}}`, each with
that API's status for the domain error.

Every error raised inside a compatible API's route (domain errors, a malformed form, anything unexpected) is rendered
by that API's `ErrorStyle`; the app's handlers and its body guard render an error in the style of the API that owns
the request's path (app.render).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ..errors import BadBody, InvalidRequest, ServerError, UnknownModel

log = logging.getLogger(__name__)


class InvalidKey(ServerError):
    """A compatible API's key is missing or not configured (both APIs answer 403)."""

    status, code = 403, "invalid_api_key"


def route_path(scope) -> str:
    """A request's path below the app's mount point (Ray Serve's route prefix is the ASGI root_path)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


# Both compatible APIs know one status for a bad request, where the native API tells 400, 404 and 422 apart.
BAD_REQUEST: Mapping[type[ServerError], int] = {InvalidRequest: 400, UnknownModel: 400, BadBody: 400}


@dataclass(frozen=True)
class ErrorStyle:
    """How one API writes an error: `body(error)` with the API's status for the error's class (the domain error's
    own status where the API has none of its own), and the routes whose errors it renders."""

    body: Callable[[ServerError], dict]
    owns: Callable[[str], bool]  # whether a request path belongs to this API
    statuses: Mapping[type[ServerError], int] = field(default_factory=dict)
    routes: list[tuple[str, Callable, list[str], dict]] = field(default_factory=list)

    def status(self, error: ServerError) -> int:
        return next((self.statuses[c] for c in type(error).__mro__ if c in self.statuses), error.status)

    def render(self, error: ServerError) -> JSONResponse:
        return JSONResponse(self.body(error), status_code=self.status(error), headers=error.headers())

    def route(self, path: str, methods: list[str], **options):
        """Decorator: a module-level handler of this API at `path` (added to an app by add_routes)."""
        def register(endpoint):
            self.routes.append((path, endpoint, methods, options))
            return endpoint

        return register

    def add_routes(self, app: FastAPI) -> None:
        """This API's routes on `app` itself, their errors in this style, left out of the OpenAPI document (which
        describes the native API; each compatible API follows its own published one)."""
        route_class = self.route_class()
        for path, endpoint, methods, options in self.routes:
            app.router.add_api_route(path, endpoint, methods=methods, route_class_override=route_class,
                                     include_in_schema=False, response_model_exclude_none=True, **options)

    def route_class(self) -> type[APIRoute]:
        """An APIRoute whose handler renders every error in this style."""
        style = self

        class StyledRoute(APIRoute):
            def get_route_handler(self):
                handler = super().get_route_handler()

                async def styled(request: Request):
                    try:
                        return await handler(request)
                    except ServerError as e:
                        return style.render(e)
                    except HTTPException as e:  # Starlette's form parsing: a malformed multipart body
                        return style.render(BadBody(f"Invalid request: {e.detail}", field="body"))
                    except Exception:
                        log.exception("unhandled error")
                        return style.render(ServerError("Internal server error"))

                return styled

        return StyledRoute


def message_only(key: str) -> Callable[[ServerError], dict]:
    """The compatible APIs' body: the message alone, under `key`."""
    return lambda error: {key: error.message}


def openai_body(error: ServerError, status: int) -> dict:
    """OpenAI's body: the message, a type by status, the parameter at fault (`param`) and our code."""
    kind = ("authentication_error" if status in (401, 403) else "rate_limit_error" if status == 429
            else "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": error.message, "type": kind, "param": error.field, "code": error.code}}


NATIVE = ErrorStyle(ServerError.body, owns=lambda path: True)


def validation_error(exc: RequestValidationError) -> ServerError:
    """Pydantic/FastAPI validation errors → one error naming the field, the problem and the limit."""
    first = exc.errors()[0]
    if first["type"] in ("json_invalid", "json_type"):
        return BadBody(f"invalid JSON: {first.get('msg', '')}", field="body")
    loc = [str(p) for p in first["loc"] if p != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
    limit = next((v for k, v in (first.get("ctx") or {}).items() if k in ("ge", "gt", "le", "lt", "max_length",
                                                                         "min_length")), None)
    return InvalidRequest(f"{field}: {first['msg']}", field=field, limit=limit)
