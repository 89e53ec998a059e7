"""Errors in each API's shape: the native `{"error": {code, message, field?, limit?}}`, LibreTranslate's
`{"error": message}`, DeepL's `{"message": message}`, OpenAI's `{"error": {message, type, param, code}}`, each with
that API's status and wording for the domain error: one table per API (`ErrorStyle.table`).

The front's limit errors (server/errors.py) say what was counted, not in which field: a route names its fields for
them (`naming`), and LIMITS words them with those names as every API does unless its own table says otherwise.

Every error raised inside a compatible API's route (domain errors, a malformed form, anything unexpected) is rendered
by that API's `ErrorStyle`; the app's handlers and its body guard render an error in the style of the API that owns
the request's path (app.render).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ..errors import (BadBody, InvalidRequest, SamplingNeedsOneBeam, ServerError, TooManyBeams, TooManyCharacters,
                      TooManyRows, TooManySentences, TooManyTexts, TooManyTokens, UnknownModel)

log = logging.getLogger(__name__)


class InvalidKey(ServerError):
    """A compatible API's key is missing or not configured (LibreTranslate and DeepL answer 403, OpenAI 401)."""

    status, code = 403, "invalid_api_key"


def route_path(scope) -> str:
    """A request's path below the app's mount point (Ray Serve's route prefix is the ASGI root_path)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


@dataclass(frozen=True)
class Names:
    """How one request names what the front's limits count: the field holding its texts, and its names of the
    decoding knobs where they are not DecodeOptions' own (num_beams → beam_size)."""

    texts: str = "text"
    knobs: Mapping[str, str] = field(default_factory=dict)

    def knob(self, name: str) -> str:
        return self.knobs.get(name, name)


def naming(request: Request, texts: str, **knobs: str) -> None:
    """A route's names for the errors of this request (read back by names_of when an error is rendered)."""
    request.state.names = Names(texts, knobs)


def names_of(request: Request) -> Names:
    return getattr(request.state, "names", Names())


# An entry of an API's table: its status for the error, or a function that words the error in the API's terms
# (its result is looked up in the table again, for its status).
Wording = Callable[[ServerError, Names], ServerError]
Entry = Union[int, Wording]


def over_items(error: TooManyTexts, names: Names) -> ServerError:
    return InvalidRequest(f"{names.texts} has {error.count} items; at most {error.limit}", field=names.texts,
                          limit=error.limit)


def over_characters(error: TooManyCharacters, names: Names) -> ServerError:
    return InvalidRequest(f"{names.texts}: the request has {error.count} characters; at most {error.limit}",
                          field=names.texts, limit=error.limit)


def over_sentences(error: TooManySentences, names: Names) -> ServerError:
    return InvalidRequest(f"{names.texts}: the request has {error.count} sentences to translate; at most "
                          f"{error.limit}", field=names.texts, limit=error.limit)


def over_knob(name: str, error: TooManyBeams | TooManyTokens) -> ServerError:
    return InvalidRequest(f"{name} {error.count} is above the limit {error.limit}", field=name, limit=error.limit)


def over_beams(error: TooManyBeams, names: Names) -> ServerError:
    return over_knob(names.knob("num_beams"), error)


def over_tokens(error: TooManyTokens, names: Names) -> ServerError:
    return over_knob(names.knob(error.knob), error)


def over_rows(error: TooManyRows, names: Names) -> ServerError:
    name = names.knob("num_beams")
    return InvalidRequest(error.worded(name), field=name, limit=error.limit)


def sampling_with_beams(error: SamplingNeedsOneBeam, names: Names) -> ServerError:
    return InvalidRequest(error.message, field=names.knob("num_beams"), limit=error.limit)


# The front's limit errors as every API words them, unless its own table says otherwise.
LIMITS: Mapping[type[ServerError], Entry] = {
    TooManyTexts: over_items, TooManyCharacters: over_characters, TooManySentences: over_sentences,
    TooManyBeams: over_beams, TooManyRows: over_rows, TooManyTokens: over_tokens,
    SamplingNeedsOneBeam: sampling_with_beams}
# The compatible APIs know one status for a bad request, where the native API tells 400, 404 and 422 apart.
BAD_REQUEST: Mapping[type[ServerError], Entry] = {InvalidRequest: 400, UnknownModel: 400, BadBody: 400}


@dataclass(frozen=True)
class ErrorStyle:
    """How one API writes an error: `body(error, status)`, with the API's status and wording for the error's class
    from `table` (the domain error's own where the table has none)."""

    body: Callable[[ServerError, int], dict]
    owns: Callable[[str], bool]  # whether a request path belongs to this API
    table: Mapping[type[ServerError], Entry] = field(default_factory=dict)

    def answer(self, error: ServerError, names: Names = Names()) -> tuple[ServerError, int]:
        """The error as this API words it, and its status: the table's first entry along the error's classes."""
        entry = next((self.table[c] for c in type(error).__mro__ if c in self.table), error.status)
        if isinstance(entry, int):
            return error, entry
        return self.answer(entry(error, names), names)

    def payload(self, error: ServerError, names: Names = Names()) -> dict:
        return self.body(*self.answer(error, names))

    def render(self, error: ServerError, names: Names = Names()) -> JSONResponse:
        worded, status = self.answer(error, names)
        return JSONResponse(self.body(worded, status), status_code=status, headers=error.headers())

    def router(self) -> APIRouter:
        """A router for this API's routes, their errors in this style, left out of the OpenAPI document (which
        describes the native API; each compatible API follows its own published one)."""
        return APIRouter(route_class=self.route_class(), include_in_schema=False)

    def route_class(self) -> type[APIRoute]:
        """An APIRoute whose handler renders every error in this style, and whose answers leave None fields out (as
        the compatible APIs' own documents show them)."""
        style = self

        class StyledRoute(APIRoute):
            def __init__(self, path: str, endpoint: Callable, **options):
                super().__init__(path, endpoint, **{**options, "response_model_exclude_none": True})

            def get_route_handler(self):
                handler = super().get_route_handler()

                async def styled(request: Request):
                    try:
                        return await handler(request)
                    except ServerError as e:
                        return style.render(e, names_of(request))
                    except HTTPException as e:  # Starlette's form parsing: a malformed multipart body
                        return style.render(BadBody(f"Invalid request: {e.detail}", field="body"))
                    except Exception:
                        log.exception("unhandled error")
                        return style.render(ServerError("Internal server error"))

                return styled

        return StyledRoute


def message_only(key: str) -> Callable[[ServerError, int], dict]:
    """The compatible APIs' body: the message alone, under `key`."""
    return lambda error, status: {key: error.message}


def openai_body(error: ServerError, status: int) -> dict:
    """OpenAI's body: the message, a type by status, the parameter at fault (`param`) and our code."""
    kind = ("authentication_error" if status in (401, 403) else "rate_limit_error" if status == 429
            else "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": error.message, "type": kind, "param": error.field, "code": error.code}}


NATIVE = ErrorStyle(lambda error, status: error.body(), owns=lambda path: True, table=LIMITS)


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
