"""Error rendering for a compatible API: domain errors in that API's JSON shape and statuses.

Every error raised inside one of its routes (domain errors, a malformed form, anything unexpected) is rendered by the
API's own `ErrorStyle`, not by the app's native handlers; the app's body guard asks `owns(path)` so that a body
too large or not UTF-8 on these paths is rendered the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping

from fastapi import FastAPI, Request
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


# Both APIs know one status for a bad request, where the native API tells 400, 404 and 422 apart.
BAD_REQUEST: Mapping[type[ServerError], int] = {InvalidRequest: 400, UnknownModel: 400, BadBody: 400}


@dataclass(frozen=True)
class ErrorStyle:
    """How one API writes an error: `{message_key: message}` with the API's status for the error's class (the
    domain error's own status where the API has none of its own)."""

    message_key: str
    owns: Callable[[str], bool]  # whether a request path belongs to this API
    statuses: Mapping[type[ServerError], int] = field(default_factory=dict)

    def status(self, error: ServerError) -> int:
        return next((self.statuses[c] for c in type(error).__mro__ if c in self.statuses), error.status)

    def render(self, error: ServerError) -> JSONResponse:
        headers = {} if error.retry_after_s is None else {"Retry-After": str(error.retry_after_s)}
        return JSONResponse({self.message_key: error.message}, status_code=self.status(error), headers=headers)

    def route(self, app: FastAPI, path: str, methods: list[str], **options):
        """Decorator: `endpoint` on `app` itself at `path`, its errors in this style, left out of the OpenAPI
        document (which describes the native API; each compatible API follows its own published one)."""
        route_class = self.route_class()

        def register(endpoint):
            app.router.add_api_route(path, endpoint, methods=methods, route_class_override=route_class,
                                     include_in_schema=False, response_model_exclude_none=True, **options)
            return endpoint

        return register

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
