"""LibreTranslate's HTTP API (as LibreTranslate 1.9 answers it), mapped onto the domain: drop-in for Mastodon,
Weblate, Misskey and its forks, libretranslatepy and deep-translator.

Parameters come from a JSON object, a form or the query string (see reading.py); `q` is a list only in JSON.
Errors are `{"error": "..."}` with LibreTranslate's statuses: 400 bad request, 403 key rejected or quota used
up, 429 `Slowdown: ...`, 413 body too large. Any origin may call these routes from a browser (CORS), as
LibreTranslate allows.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Literal
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile

from model import SUFFIXES

from ..domain import DecodeOptions, DetectedLanguage, TextOptions, TranslationJob, TranslationResult
from ..errors import (InvalidRequest, LanguageNotServed, ServerError, TooManyBeams, TooManyCharacters,
                      UnsupportedFileType)
from ..front import dispatch
from ..front.access import QuotaExceeded, characters
from ..front.document_jobs import check_file_type
from ..front.served_languages import ServedLanguages, canonical, check_served, language_name
from .deps import KeySending, caller_of, served
from .errors import BAD_REQUEST, LIMITS, ErrorStyle, InvalidKey, Names, message_only, naming, over_characters
from .reading import present, read_params, validated
from .resending import resendable
from .streaming import attachment, json_response, until_disconnect

PATHS = frozenset({"/translate", "/languages", "/detect", "/translate_file", "/frontend/settings", "/health"})
DOWNLOADS = "/download_file/"
API_KEY = KeySending(None, "api_key", "Invalid API key")


def owns(path: str) -> bool:
    return path in PATHS or path.startswith(DOWNLOADS)


def request_too_large(error: TooManyCharacters, names: Names) -> ServerError:
    if names.texts == "file":  # a file's characters: worded as the native API words them
        return over_characters(error, names)
    return InvalidRequest(f"Invalid request: request ({error.count}) exceeds text limit ({error.limit})",
                          field=names.texts, limit=error.limit)


def over_alternatives(error: TooManyBeams, names: Names) -> ServerError:
    """`alternatives` asks for that many beams beside the best one."""
    return InvalidRequest(invalid("alternatives", f"at most {error.limit - 1}"), field="alternatives",
                          limit=error.limit - 1)


def not_served(error: LanguageNotServed, names: Names) -> ServerError:
    return InvalidRequest(f"{error.code} is not supported", field=error.side)


def file_type(error: UnsupportedFileType, names: Names) -> ServerError:
    return InvalidRequest("Invalid request: file format not supported", field="file", limit=list(error.supported))


STYLE = ErrorStyle(message_only("error"), owns, {**LIMITS, **BAD_REQUEST, TooManyCharacters: request_too_large,
                                                 TooManyBeams: over_alternatives, InvalidKey: 403,
                                                 QuotaExceeded: 403, LanguageNotServed: not_served,
                                                 UnsupportedFileType: file_type})
router = STYLE.router()


class LibreTranslateForm(BaseModel):
    q: str | list[str]
    source: str = Field(min_length=1, max_length=32)
    target: str = Field(min_length=1, max_length=32)
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(0, ge=0)


class DetectForm(BaseModel):
    q: str


class FileForm(BaseModel):
    source: str = Field(min_length=1, max_length=32)
    target: str = Field(min_length=1, max_length=32)


class FileNotFound(ServerError):
    status, code = 404, "not_found"


class Detection(BaseModel):
    confidence: float  # 0..100
    language: str


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]
    detectedLanguage: Detection | list[Detection] | None = None  # only for source "auto"
    alternatives: list[str] | list[list[str]] | None = None  # only when asked for


class FileTranslated(BaseModel):
    translatedFileUrl: str


class LibreLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]


def missing(name: str) -> str:
    return f"Invalid request: missing {name} parameter"


def invalid(name: str, why: str) -> str:
    return f"Invalid request: {name}: {why}"


def detection(found: DetectedLanguage | None) -> Detection:
    if found is None:  # an empty text: nothing to detect, but clients index this list by position
        return Detection(confidence=0.0, language="und")
    return Detection(confidence=round(100 * found.confidence, 2), language=found.language)


def translate_response(result: TranslationResult, single: bool, auto: bool,
                       alternatives: int) -> LibreTranslateResponse:
    texts = [t.text for t in result.texts]
    detected = [detection(t.detected) for t in result.texts] if auto else None
    others = [[a.text for a in t.alternatives] for t in result.texts] if alternatives else None
    if single:
        return LibreTranslateResponse(translatedText=texts[0], detectedLanguage=detected and detected[0],
                                 alternatives=others and others[0])
    return LibreTranslateResponse(translatedText=texts, detectedLanguage=detected, alternatives=others)


@router.post("/translate", response_model=LibreTranslateResponse)
@resendable
async def translate(request: Request):
    state = served(request)
    params = await read_params(request)
    caller = await caller_of(request, API_KEY, params, work=True)
    form = validated(LibreTranslateForm, present(params, ["q", "source", "target", "format", "alternatives"]), missing,
                     invalid)
    single = isinstance(form.q, str)
    texts = [form.q] if single else form.q
    if not form.q:
        raise InvalidRequest(missing("q"), field="q")
    auto = dispatch.is_auto(form.source)
    check_served(state.provider, None if auto else form.source, form.target)
    candidates = form.alternatives + 1
    job = TranslationJob(
        texts=tuple(texts), fields=("q",) if single else tuple(f"q[{i}]" for i in range(len(texts))),
        source_lang=None if auto else canonical(form.source), target_lang=canonical(form.target),
        options=DecodeOptions(num_beams=candidates if form.alternatives else None, n_best=candidates),
        text_options=TextOptions(format=form.format, split_sentences="nonewlines" if form.format == "html" else "1"))
    naming(request, "q", num_beams="alternatives")

    async def work():
        result = await dispatch.translate(state.provider, job, spending=state.keys.spending(caller, characters(texts)))
        return json_response(translate_response(result, single, auto, form.alternatives))

    return await until_disconnect(request, work())


@router.post("/detect", response_model=list[Detection])
@resendable
async def detect(request: Request):
    state = served(request)
    params = await read_params(request)
    await caller_of(request, API_KEY, params, work=True)
    form = validated(DetectForm, present(params, ["q"]), missing, invalid)
    if not form.q:
        raise InvalidRequest(missing("q"), field="q")
    naming(request, "q")
    return [detection(found) for found in dispatch.detect(state.provider, form.q)]


@router.post("/translate_file", response_model=FileTranslated)
@resendable
async def translate_file(request: Request):
    """A multipart `file` translated as a document job, answered when it is done (as LibreTranslate answers): a URL
    to fetch it. The file is charged the characters of its text against the character quota."""
    state = served(request)
    naming(request, "file")
    params = await read_params(request)
    caller = await caller_of(request, API_KEY, params, work=True)
    upload = params.first("file")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest(missing("file"), field="file")
    form = validated(FileForm, present(params, ["source", "target"]), missing, invalid)
    auto = dispatch.is_auto(form.source)
    check_served(state.provider, None if auto else form.source, form.target)
    filename = PurePath(upload.filename or "file")
    check_file_type(filename.name)
    data = await upload.read()
    source = None if auto else canonical(form.source)

    async def work():
        handle = await state.jobs.submit(caller, data, filename.name, source, canonical(form.target))
        job = await state.jobs.finished(*handle, caller)
        if job.status == "error":
            raise InvalidRequest(f"Invalid request: {job.error_message}", field="file")
        name = state.downloads.put(job.download_name, await state.jobs.download(job))
        return FileTranslated(translatedFileUrl=f"{request.base_url}download_file/{quote(name)}")

    return await until_disconnect(request, work())


@router.get("/download_file/{name}")
async def download_file(name: str, request: Request):
    state = served(request)
    stored = state.downloads.get(name)
    if stored is None:
        raise FileNotFound(f"{name}: no such file (translated files are kept {state.settings.download_ttl_s:g} s)")
    return attachment(stored.content, stored.filename)


@router.api_route("/languages", methods=["GET", "POST"], response_model=list[LibreLanguage])
@resendable
async def languages(request: Request):
    state = served(request)
    languages = ServedLanguages.of(state.provider)
    codes = list(dict.fromkeys(languages.sources + languages.targets))
    return [LibreLanguage(code=code, name=language_name(code), targets=languages.targets_of(code)) for code in codes]


@router.get("/frontend/settings")
async def frontend_settings(request: Request):
    state = served(request)
    target = ServedLanguages.of(state.provider).targets[0]
    return {"charLimit": state.settings.max_request_chars, "frontendTimeout": 500, "apiKeys": state.keys.required,
            "keyRequired": state.keys.required, "suggestions": False, "filesTranslation": True,
            "supportedFilesFormat": list(SUFFIXES),
            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                         "target": {"code": target, "name": language_name(target)}}}


@router.get("/health")
async def health(request: Request):
    state = served(request)
    ok, detail = await state.provider.health(state.settings.health_stale_s)
    return JSONResponse({"status": "ok"} if ok else {"error": detail}, status_code=200 if ok else 503)
