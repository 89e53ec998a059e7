"""DeepL's glossary API as the official clients speak it: v2 (one dictionary a glossary) and v3 (multilingual: one
dictionary per language pair), over the one glossary store (api.glossaries).

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
from ..glossary_entries import read, to_tsv
from ..glossary_store import Glossary, NewDictionary
from .deepl import STYLE, caller, missing
from .deps import served
from .glossaries import base_language, creation_time, language_pairs
from .reading import Params

router = STYLE.router()
TSV = "text/tab-separated-values"


class NotAcceptable(ServerError):
    status, code = 415, "unsupported_media_type"


def text_param(params: Params, name: str, source: dict | None = None) -> str:
    """A required text parameter (of the request, or of one `source` dictionary object in a v3 body)."""
    value = params.first(name) if source is None else source.get(name)
    if value is None or value == "":
        raise InvalidRequest(missing(name), field=name)
    if not isinstance(value, str):
        raise InvalidRequest(f"Value for '{name}' not supported: a text is expected.", field=name)
    return value


def new_dictionary(request: Request, source: Params | dict, field: str) -> NewDictionary:
    """A dictionary as DeepL's clients send one: source_lang, target_lang, entries, entries_format."""
    state = served(request)
    params, obj = (source, None) if isinstance(source, Params) else (Params({}), source)
    entries_format = (obj.get("entries_format") if obj is not None else params.first("entries_format")) or "tsv"
    entries = read(text_param(params, "entries", obj), str(entries_format).lower(), field,
                   state.glossaries.limits)
    return state.glossaries.dictionary(state.provider, text_param(params, "source_lang", obj),
                                       text_param(params, "target_lang", obj), entries)


def dictionaries_param(request: Request, params: Params, required: bool) -> list[NewDictionary]:
    given = params.first("dictionaries")
    if given is None and not required:
        return []
    if not isinstance(given, list) or not given or not all(isinstance(d, dict) for d in given):
        raise InvalidRequest(missing("dictionaries"), field="dictionaries")
    return [new_dictionary(request, d, f"dictionaries[{i}].entries") for i, d in enumerate(given)]


def v2_info(glossary: Glossary) -> dict:
    if len(glossary.dictionaries) != 1:
        raise InvalidRequest(f"This glossary has {len(glossary.dictionaries)} dictionaries: read it through "
                             f"/v3/glossaries", field="glossary_id")
    dictionary = glossary.dictionaries[0]
    return {"glossary_id": glossary.id, "name": glossary.name, "ready": True, "source_lang": dictionary.source_lang,
            "target_lang": dictionary.target_lang, "creation_time": creation_time(glossary.created),
            "entry_count": dictionary.entry_count}


def v3_info(glossary: Glossary) -> dict:
    return {"glossary_id": glossary.id, "name": glossary.name, "creation_time": creation_time(glossary.created),
            "dictionaries": [dictionary_info(d.source_lang, d.target_lang, d.entry_count)
                             for d in glossary.dictionaries]}


def dictionary_info(source_lang: str, target_lang: str, entry_count: int) -> dict:
    return {"source_lang": source_lang, "target_lang": target_lang, "entry_count": entry_count}


async def owner_and_params(request: Request) -> tuple[str, Params]:
    who, params = await caller(request)
    return served(request).glossaries.owner(who), params


def pair_params(params: Params) -> tuple[str, str]:
    return text_param(params, "source_lang"), text_param(params, "target_lang")


# ---- v2 --------------------------------------------------------------------------------------------------------

@router.get("/v2/glossary-language-pairs")
async def glossary_language_pairs(request: Request):
    await caller(request)
    pairs = language_pairs(served(request).provider)
    return {"supported_languages": [{"source_lang": source, "target_lang": target} for source, target in pairs]}


@router.post("/v2/glossaries", status_code=201)
async def create_v2(request: Request):
    owner, params = await owner_and_params(request)
    name = text_param(params, "name")
    glossary = await served(request).glossaries.create(owner, name, [new_dictionary(request, params, "entries")])
    return v2_info(glossary)


@router.get("/v2/glossaries")
async def list_v2(request: Request):
    owner, _ = await owner_and_params(request)
    glossaries = await served(request).glossaries.glossaries(owner)
    return {"glossaries": [v2_info(g) for g in glossaries if len(g.dictionaries) == 1]}


@router.get("/v2/glossaries/{glossary_id}")
async def get_v2(glossary_id: str, request: Request):
    owner, _ = await owner_and_params(request)
    return v2_info(await served(request).glossaries.get(owner, glossary_id))


@router.get("/v2/glossaries/{glossary_id}/entries")
async def entries_v2(glossary_id: str, request: Request):
    owner, _ = await owner_and_params(request)
    accept = request.headers.get("accept", "*/*")
    if TSV not in accept and "*/*" not in accept:
        raise NotAcceptable("No supported media type specified in Accept header", field="Accept")
    glossaries = served(request).glossaries
    dictionary = v2_info(await glossaries.get(owner, glossary_id))
    entries = await glossaries.entries(owner, glossary_id, dictionary["source_lang"], dictionary["target_lang"])
    return Response(to_tsv(entries), media_type=f"{TSV}; charset=UTF-8")


@router.delete("/v2/glossaries/{glossary_id}", status_code=204)
@router.delete("/v3/glossaries/{glossary_id}", status_code=204)
async def delete(glossary_id: str, request: Request):
    owner, _ = await owner_and_params(request)
    await served(request).glossaries.delete(owner, glossary_id)
    return Response(status_code=204)


# ---- v3 --------------------------------------------------------------------------------------------------------

@router.post("/v3/glossaries", status_code=201)
async def create_v3(request: Request):
    owner, params = await owner_and_params(request)
    name = text_param(params, "name")
    dictionaries = dictionaries_param(request, params, required=True)
    return v3_info(await served(request).glossaries.create(owner, name, dictionaries))


@router.get("/v3/glossaries")
async def list_v3(request: Request):
    owner, _ = await owner_and_params(request)
    return {"glossaries": [v3_info(g) for g in await served(request).glossaries.glossaries(owner)]}


@router.get("/v3/glossaries/{glossary_id}")
async def get_v3(glossary_id: str, request: Request):
    owner, _ = await owner_and_params(request)
    return v3_info(await served(request).glossaries.get(owner, glossary_id))


@router.get("/v3/glossaries/{glossary_id}/entries")
async def entries_v3(glossary_id: str, request: Request):
    owner, params = await owner_and_params(request)
    source_lang, target_lang = map(base_language, pair_params(params))
    entries = await served(request).glossaries.entries(owner, glossary_id, source_lang, target_lang)
    return {"dictionaries": [{"source_lang": source_lang, "target_lang": target_lang, "entries": to_tsv(entries),
                              "entries_format": "tsv"}]}


@router.patch("/v3/glossaries/{glossary_id}")
async def update_v3(glossary_id: str, request: Request):
    """Rename (`name`) and/or merge entries into dictionaries (`dictionaries`)."""
    owner, params = await owner_and_params(request)
    name = text_param(params, "name") if "name" in params else None
    merged = dictionaries_param(request, params, required=name is None)
    return v3_info(await served(request).glossaries.update(owner, glossary_id, name, merged=merged))


@router.put("/v3/glossaries/{glossary_id}/dictionaries")
async def replace_v3(glossary_id: str, request: Request):
    owner, params = await owner_and_params(request)
    dictionary = new_dictionary(request, params, "entries")
    await served(request).glossaries.update(owner, glossary_id, replaced=[dictionary])
    return dictionary_info(dictionary.source_lang, dictionary.target_lang, len(dictionary.entries))


@router.delete("/v3/glossaries/{glossary_id}/dictionaries", status_code=204)
async def delete_dictionary_v3(glossary_id: str, request: Request):
    owner, params = await owner_and_params(request)
    await served(request).glossaries.delete_dictionary(owner, glossary_id, *pair_params(params))
    return Response(status_code=204)
