"""What every compatible route reads from a request: its parameters, wherever the client put them.

Clients put parameters in a JSON object, a urlencoded or multipart form, or the query string, even on a POST
(deep-translator sends only a query string; the DeepL client sends a form body on a GET). All of them are read;
a name given in the body wins over the same name in the query string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..errors import BadBody, InvalidRequest

FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
Schema = TypeVar("Schema", bound=BaseModel)


@dataclass(frozen=True)
class Params:
    values: dict[str, list[Any]]  # every value given for a name, body first; a JSON array is one value

    def first(self, name: str) -> Any | None:
        found = self.values.get(name)
        return found[0] if found else None

    def many(self, name: str) -> list[Any]:
        """Every value given for `name`, the items of a JSON array in place of the array (`text=a&text=b`
        and `{"text": ["a", "b"]}` read the same)."""
        out: list[Any] = []
        for value in self.values.get(name, []):
            out.extend(value if isinstance(value, list) else [value])
        return out

    def __contains__(self, name: str) -> bool:
        return name in self.values


def json_or_none(text: str | bytes) -> Any | None:
    """The JSON value `text` holds; None where it holds none, or one nested deeper than the parser recurses (a
    RecursionError: 10^5 brackets are 200 kB, well within a body's limit)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


async def read_params(request: Request) -> Params:
    values: dict[str, list[Any]] = {}
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        body = await request.body()
        if body.strip():
            payload = json_or_none(body)
            if not isinstance(payload, dict):
                raise BadBody("Invalid JSON format", field="body")
            values = {name: [value] for name, value in payload.items()}
    elif kind in FORMS:
        for name, value in (await request.form()).multi_items():
            values.setdefault(name, []).append(value)
    for name, value in request.query_params.multi_items():
        values.setdefault(name, []).append(value)
    return Params(values)


def validated(schema: type[Schema], data: dict[str, Any], missing: Callable[[str], str],
              invalid: Callable[[str, str], str]) -> Schema:
    """`data` as `schema`; the first problem as a 400 worded by the API: `missing(name)` or `invalid(name, why)`."""
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "request"
        message = missing(name) if first["type"] == "missing" else invalid(name, first["msg"])
        raise InvalidRequest(message, field=name) from None


def present(params: Params, names: list[str], lists: tuple[str, ...] = ()) -> dict[str, Any]:
    """The parameters among `names` that the request gave: the first value of each, every value of `lists`."""
    return {name: params.many(name) if name in lists else params.first(name) for name in names if name in params}
