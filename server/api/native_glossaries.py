"""The native glossaries: `/v1/glossaries` (create, list, get, entries of a dictionary, merge or rename, delete) over
the store DeepL's glossary API shares (a glossary made through either is used through both), and the glossary of a
/v1 translation: a stored one (`glossary_id`) or one given inline (`glossary`, {"source term": "target term"}).

    POST /v1/glossaries {"name": "numbers", "dictionaries": [{"source_lang": "en", "target_lang": "fr",
                         "entries": {"forty-two": "quarante-deux"}}]}
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations as objects.
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ..errors import InvalidRequest
from ..front.glossaries import base_language, creation_time
from ..glossary_entries import Entries, from_mapping
from ..glossary_store import StoredGlossary
from .deps import AppState, authorize, caller, served
from .reading import json_or_none


class DictionaryEntries(BaseModel):
    source_lang: str = Field(max_length=32, examples=["en"])
    target_lang: str = Field(max_length=32, examples=["fr"])
    entries: dict[str, str] = Field(examples=[{"forty-two": "quarante-deux"}])


class CreateGlossary(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    dictionaries: list[DictionaryEntries] = Field(min_length=1)


class UpdateGlossary(BaseModel):
    name: str | None = Field(None, min_length=1, max_length=200)
    dictionaries: list[DictionaryEntries] = Field([], description="entries merged into each dictionary: a source "
                                                                  "term given replaces its target; new ones are added")


class DictionaryCard(BaseModel):
    source_lang: str
    target_lang: str
    entry_count: int


class GlossaryCard(BaseModel):
    id: str
    name: str
    created: str = Field(description="ISO 8601, UTC")
    dictionaries: list[DictionaryCard]


class GlossaryList(BaseModel):
    glossaries: list[GlossaryCard]


class GlossaryEntries(BaseModel):
    source_lang: str
    target_lang: str
    entries: dict[str, str]


def card(glossary: StoredGlossary) -> GlossaryCard:
    return GlossaryCard(id=glossary.id, name=glossary.name, created=creation_time(glossary.created),
                        dictionaries=[DictionaryCard(source_lang=d.source_lang, target_lang=d.target_lang,
                                                     entry_count=d.entry_count) for d in glossary.dictionaries])


def json_object(text: str | None, field: str) -> dict | None:
    """A form field holding a JSON object (a file request's inline glossary)."""
    if text is None:
        return None
    value = json_or_none(text)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidRequest(f'{field}: a JSON object of terms is expected, {{"source term": "target term"}}',
                             field=field)
    return value


async def job_glossary(state: AppState, who: str | None, glossary_id: str | None, inline: dict | None,
                       source_lang: str | None, target_lang: str | None) -> Entries:
    """The entries a /v1 translation keeps: an inline glossary's, checked against the glossary limits, or the stored
    glossary's dictionary for the request's languages (which it must then name)."""
    if glossary_id is not None and inline is not None:
        raise InvalidRequest("glossary_id, glossary: give one or the other", field="glossary")
    if inline is not None:
        return from_mapping(inline, "glossary", state.glossaries.limits)
    if glossary_id is None:
        return ()
    glossaries = state.glossaries
    return await glossaries.terms(glossaries.owner(who), glossary_id, source_lang, target_lang)


def dictionaries(request: Request, given: list[DictionaryEntries]) -> list:
    state = served(request)
    return [state.glossaries.dictionary(state.provider, d.source_lang, d.target_lang,
                                        from_mapping(d.entries, f"dictionaries[{i}].entries", state.glossaries.limits),
                                        field=f"dictionaries[{i}]") for i, d in enumerate(given)]


def owner(request: Request) -> str:
    return served(request).glossaries.owner(caller(request))


async def create(body: CreateGlossary, request: Request):
    glossaries = served(request).glossaries
    return card(await glossaries.create(owner(request), body.name, dictionaries(request, body.dictionaries)))


async def list_glossaries(request: Request):
    return GlossaryList(glossaries=[card(g) for g in await served(request).glossaries.glossaries(owner(request))])


async def get(glossary_id: str, request: Request):
    return card(await served(request).glossaries.get(owner(request), glossary_id))


async def entries(glossary_id: str, source_lang: str, target_lang: str, request: Request):
    found = await served(request).glossaries.entries(owner(request), glossary_id, source_lang, target_lang)
    return GlossaryEntries(source_lang=base_language(source_lang), target_lang=base_language(target_lang),
                           entries=dict(found))


async def update(glossary_id: str, body: UpdateGlossary, request: Request):
    glossaries = served(request).glossaries
    merged = dictionaries(request, body.dictionaries)
    return card(await glossaries.update(owner(request), glossary_id, body.name, merged=merged))


async def delete(glossary_id: str, request: Request):
    await served(request).glossaries.delete(owner(request), glossary_id)
    return Response(status_code=204)


def router(guarded: bool) -> APIRouter:
    """The /v1/glossaries routes, `guarded` by the caller's key (keys or limits configured)."""
    routes = APIRouter(prefix="/v1/glossaries", tags=["glossaries"],
                       dependencies=[Depends(authorize)] if guarded else [])
    routes.add_api_route("", create, methods=["POST"], response_model=GlossaryCard, status_code=201)
    routes.add_api_route("", list_glossaries, methods=["GET"], response_model=GlossaryList)
    routes.add_api_route("/{glossary_id}", get, methods=["GET"], response_model=GlossaryCard)
    routes.add_api_route("/{glossary_id}/entries", entries, methods=["GET"], response_model=GlossaryEntries)
    routes.add_api_route("/{glossary_id}", update, methods=["PATCH"], response_model=GlossaryCard)
    routes.add_api_route("/{glossary_id}", delete, methods=["DELETE"], status_code=204, response_class=Response)
    return routes
