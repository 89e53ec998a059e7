"""DeepL's glossary API as the official clients speak it: v2 (one dictionary a glossary) and v3 (multilingual: one
dictionary per language pair), over the one glossary store (front.glossaries).

v2: `GET /v2/glossary-language-pairs`, `POST /v2/glossaries` (entries as TSV or CSV; 201), `GET /v2/glossaries`,
`GET /v2/glossaries/{id}`, `GET /v2/glossaries/{id}/entries` (TSV), `DELETE /v2/glossaries/{id}` (204).
v3: `POST /v3/glossaries`, `GET /v3/glossaries`, `GET /v3/glossaries/{id}`, `GET /v3/glossaries/{id}/entries`
(`source_lang`, `target_lang`), `PATCH /v3/glossaries/{id}` (rename, merge entries), `PUT
/v3/glossaries/{id}/dictionaries` (replace one), `DELETE /v3/glossaries/{id}[/dictionaries]`.
A multilingual glossary of several dictionaries is listed and read through v3 only (v2 shows one language pair);
deleting works through either. Errors are DeepL's `{"message"}`: 404 for a glossary that is not the caller's.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from ..errors import InvalidRequest, ServerError
from ..front.glossaries import base_language, creation_time, language_pairs
from ..glossary_entries import read, to_tsv
from ..glossary_store import StoredGlossary, NewDictionary
from .deepl import STYLE, caller, missing
from .deps import served
from .reading import Params

router = STYLE.router()
TSV = "text/tab-separated-values"


class TsvNotAccepted(ServerError):
    """Entries asked for in another format than TSV: DeepL answers 415."""

    status, code = 415, "unsupported_media_type"


def text_field(fields: dict, name: str) -> str:
    """A required text of a request, or of one dictionary object in a v3 body."""
    value = fields.get(name)
    if value is None or value == "":
        raise InvalidRequest(missing(name), field=name)
    if not isinstance(value, str):
        raise InvalidRequest(f"Value for '{name}' not supported: a text is expected.", field=name)
    return value


def request_fields(params: Params) -> dict:
    """A v2 request's (or a v3 PUT's) fields: the first value of each name."""
    return {name: params.first(name) for name in params.values}


def new_dictionary(request: Request, fields: dict, field: str) -> NewDictionary:
    """A dictionary as DeepL's clients send one: source_lang, target_lang, entries, entries_format (tsv or csv);
    `field` names its entries in errors."""
    state = served(request)
    entries_format = str(fields.get("entries_format") or "tsv").lower()
    entries = read(text_field(fields, "entries"), entries_format, field, state.glossaries.limits)
    return state.glossaries.dictionary(state.provider, text_field(fields, "source_lang"),
                                       text_field(fields, "target_lang"), entries)


def dictionaries_field(request: Request, fields: dict, required: bool) -> list[NewDictionary]:
    """A v3 body's `dictionaries`: a list of dictionary objects."""
    given = fields.get("dictionaries")
    if given is None and not required:
        return []
    if not isinstance(given, list) or not given or not all(isinstance(d, dict) for d in given):
        raise InvalidRequest(missing("dictionaries"), field="dictionaries")
    return [new_dictionary(request, d, f"dictionaries[{i}].entries") for i, d in enumerate(given)]


def v2_info(glossary: StoredGlossary) -> dict:
    if len(glossary.dictionaries) != 1:
        raise InvalidRequest(f"This glossary has {len(glossary.dictionaries)} dictionaries: read it through "
                             f"/v3/glossaries", field="glossary_id")
    dictionary = glossary.dictionaries[0]
    return {"glossary_id": glossary.id, "name": glossary.name, "ready": True, "source_lang": dictionary.source_lang,
            "target_lang": dictionary.target_lang, "creation_time": creation_time(glossary.created),
            "entry_count": dictionary.entry_count}


def v3_info(glossary: StoredGlossary) -> dict:
    return {"glossary_id": glossary.id, "name": glossary.name, "creation_time": creation_time(glossary.created),
            "dictionaries": [dictionary_info(d.source_lang, d.target_lang, d.entry_count)
                             for d in glossary.dictionaries]}


def dictionary_info(source_lang: str, target_lang: str, entry_count: int) -> dict:
    return {"source_lang": source_lang, "target_lang": target_lang, "entry_count": entry_count}


async def owner_and_fields(request: Request) -> tuple[str, dict]:
    """Whose glossaries the caller sees, and the request's fields."""
    who, params = await caller(request)
    return served(request).glossaries.owner(who), request_fields(params)


def language_pair(fields: dict) -> tuple[str, str]:
    return text_field(fields, "source_lang"), text_field(fields, "target_lang")


# ---- v2 --------------------------------------------------------------------------------------------------------

@router.get("/v2/glossary-language-pairs")
async def glossary_language_pairs(request: Request):
    await caller(request)
    pairs = language_pairs(served(request).provider)
    return {"supported_languages": [{"source_lang": source, "target_lang": target} for source, target in pairs]}


@router.post("/v2/glossaries", status_code=201)
async def create_v2(request: Request):
    owner, fields = await owner_and_fields(request)
    name = text_field(fields, "name")
    glossary = await served(request).glossaries.create(owner, name, [new_dictionary(request, fields, "entries")])
    return v2_info(glossary)


@router.get("/v2/glossaries")
async def list_v2(request: Request):
    owner, _ = await owner_and_fields(request)
    glossaries = await served(request).glossaries.glossaries(owner)
    return {"glossaries": [v2_info(g) for g in glossaries if len(g.dictionaries) == 1]}


@router.get("/v2/glossaries/{glossary_id}")
async def get_v2(glossary_id: str, request: Request):
    owner, _ = await owner_and_fields(request)
    return v2_info(await served(request).glossaries.get(owner, glossary_id))


@router.get("/v2/glossaries/{glossary_id}/entries")
async def entries_v2(glossary_id: str, request: Request):
    owner, _ = await owner_and_fields(request)
    accept = request.headers.get("accept", "*/*")
    if TSV not in accept and "*/*" not in accept:
        raise TsvNotAccepted("No supported media type specified in Accept header", field="Accept")
    glossaries = served(request).glossaries
    dictionary = v2_info(await glossaries.get(owner, glossary_id))
    entries = await glossaries.entries(owner, glossary_id, dictionary["source_lang"], dictionary["target_lang"])
    return Response(to_tsv(entries), media_type=f"{TSV}; charset=UTF-8")


@router.delete("/v2/glossaries/{glossary_id}", status_code=204)
@router.delete("/v3/glossaries/{glossary_id}", status_code=204)
async def delete(glossary_id: str, request: Request):
    owner, _ = await owner_and_fields(request)
    await served(request).glossaries.delete(owner, glossary_id)
    return Response(status_code=204)


# ---- v3 --------------------------------------------------------------------------------------------------------

@router.post("/v3/glossaries", status_code=201)
async def create_v3(request: Request):
    owner, fields = await owner_and_fields(request)
    name = text_field(fields, "name")
    dictionaries = dictionaries_field(request, fields, required=True)
    return v3_info(await served(request).glossaries.create(owner, name, dictionaries))


@router.get("/v3/glossaries")
async def list_v3(request: Request):
    owner, _ = await owner_and_fields(request)
    return {"glossaries": [v3_info(g) for g in await served(request).glossaries.glossaries(owner)]}


@router.get("/v3/glossaries/{glossary_id}")
async def get_v3(glossary_id: str, request: Request):
    owner, _ = await owner_and_fields(request)
    return v3_info(await served(request).glossaries.get(owner, glossary_id))


@router.get("/v3/glossaries/{glossary_id}/entries")
async def entries_v3(glossary_id: str, request: Request):
    owner, fields = await owner_and_fields(request)
    source_lang, target_lang = map(base_language, language_pair(fields))
    entries = await served(request).glossaries.entries(owner, glossary_id, source_lang, target_lang)
    return {"dictionaries": [{"source_lang": source_lang, "target_lang": target_lang, "entries": to_tsv(entries),
                              "entries_format": "tsv"}]}


@router.patch("/v3/glossaries/{glossary_id}")
async def update_v3(glossary_id: str, request: Request):
    """Rename (`name`) and/or merge entries into dictionaries (`dictionaries`)."""
    owner, fields = await owner_and_fields(request)
    name = text_field(fields, "name") if "name" in fields else None
    merged = dictionaries_field(request, fields, required=name is None)
    return v3_info(await served(request).glossaries.update(owner, glossary_id, name, merged=merged))


@router.put("/v3/glossaries/{glossary_id}/dictionaries")
async def replace_v3(glossary_id: str, request: Request):
    owner, fields = await owner_and_fields(request)
    dictionary = new_dictionary(request, fields, "entries")
    await served(request).glossaries.update(owner, glossary_id, replaced=[dictionary])
    return dictionary_info(dictionary.source_lang, dictionary.target_lang, len(dictionary.entries))


@router.delete("/v3/glossaries/{glossary_id}/dictionaries", status_code=204)
async def delete_dictionary_v3(glossary_id: str, request: Request):
    owner, fields = await owner_and_fields(request)
    await served(request).glossaries.delete_dictionary(owner, glossary_id, *language_pair(fields))
    return Response(status_code=204)
