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

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.datastructures import MutableHeaders, UploadFile
from starlette.middleware.cors import CORSMiddleware

from model import SUFFIXES

from .. import dispatch
from ..domain import DecodeOptions, DetectedLanguage, TextOptions, TranslationJob, TranslationResult
from ..errors import InvalidRequest, ServerError
from ..keys import Keys, QuotaExceeded
from ..settings import Settings
from ..streaming import json_response, until_disconnect
from .downloads import Downloads
from .errors import BAD_REQUEST, ErrorStyle, InvalidKey, route_path
from .languages import ServedLanguages, canonical, language_name
from .reading import caller_of, present, read_params, validated

PATHS = frozenset({"/translate", "/languages", "/detect", "/translate_file", "/frontend/settings", "/health"})
DOWNLOADS = "/download_file/"
INVALID_KEY = "Invalid API key"


def owns(path: str) -> bool:
    return path in PATHS or path.startswith(DOWNLOADS)


STYLE = ErrorStyle("error", owns, {**BAD_REQUEST, InvalidKey: 403, QuotaExceeded: 403})


class TranslateForm(BaseModel):
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


class TranslateResponse(BaseModel):
    translatedText: str | list[str]
    detectedLanguage: Detection | list[Detection] | None = None  # only for source "auto"
    alternatives: list[str] | list[list[str]] | None = None  # only when asked for


class FileTranslated(BaseModel):
    translatedFileUrl: str


class LanguageEntry(BaseModel):
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


def translate_response(result: TranslationResult, single: bool, auto: bool, alternatives: int) -> TranslateResponse:
    texts = [t.text for t in result.texts]
    detected = [detection(t.detected) for t in result.texts] if auto else None
    others = [[a.text for a in t.alternatives] for t in result.texts] if alternatives else None
    if single:
        return TranslateResponse(translatedText=texts[0], detectedLanguage=detected and detected[0],
                                 alternatives=others and others[0])
    return TranslateResponse(translatedText=texts, detectedLanguage=detected, alternatives=others)


class ScopedCORS:
    """ASGI middleware: LibreTranslate's CORS on its own paths only: preflights answered, and every response
    says `Access-Control-Allow-Origin: *`, with or without an Origin header (as flask-cors sends it)."""

    def __init__(self, app):
        self.app = app
        self.cors = CORSMiddleware(app, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not owns(route_path(scope)):
            return await self.app(scope, receive, send)

        async def any_origin(message):
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault("Access-Control-Allow-Origin", "*")
            await send(message)

        await self.cors(scope, receive, any_origin)


def add_libretranslate_routes(app: FastAPI, provider, keys: Keys, settings: Settings) -> ErrorStyle:
    app.add_middleware(ScopedCORS)
    route = STYLE.route

    def served() -> ServedLanguages:
        return ServedLanguages(tuple(provider.models()))

    downloads = Downloads(settings.max_downloads, settings.download_ttl_s)

    def check_languages(source: str, target: str) -> None:
        languages = served()
        for code, side in ((source, "source"), (target, "target")):
            if not (side == "source" and dispatch.is_auto(code)) and not languages.supports(code, side):
                raise InvalidRequest(f"{code} is not supported", field=side)

    def check_size(texts: list[str]) -> int:
        characters = sum(map(len, texts))
        if characters > settings.max_request_chars:
            raise InvalidRequest(f"Invalid request: request ({characters}) exceeds text limit "
                                 f"({settings.max_request_chars})", field="q", limit=settings.max_request_chars)
        return characters

    @route(app, "/translate", ["POST"], response_model=TranslateResponse)
    async def translate(request: Request):
        params = await read_params(request)
        caller = caller_of(request, keys, params.first("api_key"), INVALID_KEY, work=True)
        form = validated(TranslateForm, present(params, ["q", "source", "target", "format", "alternatives"]),
                         missing, invalid)
        single = isinstance(form.q, str)
        texts = [form.q] if single else form.q
        if not form.q:
            raise InvalidRequest(missing("q"), field="q")
        characters = check_size(texts)
        auto = dispatch.is_auto(form.source)
        check_languages(form.source, form.target)
        if form.alternatives >= settings.beam_limit:
            raise InvalidRequest(invalid("alternatives", f"at most {settings.beam_limit - 1}"), field="alternatives",
                                 limit=settings.beam_limit - 1)
        candidates = form.alternatives + 1
        job = TranslationJob(
            texts=tuple(texts), fields=("q",) if single else tuple(f"q[{i}]" for i in range(len(texts))),
            source_lang=None if auto else canonical(form.source), target_lang=canonical(form.target),
            options=DecodeOptions(num_beams=candidates if form.alternatives else None, n_best=candidates),
            texts_field="q", beams_field="alternatives",
            text_options=TextOptions(format=form.format,
                                     split_sentences="nonewlines" if form.format == "html" else "1"))

        async def work():
            with keys.spending(caller, characters):
                result = await dispatch.translate(provider, job)
            return json_response(translate_response(result, single, auto, form.alternatives))

        return await until_disconnect(request, work())

    @route(app, "/detect", ["POST"], response_model=list[Detection])
    async def detect(request: Request):
        params = await read_params(request)
        caller_of(request, keys, params.first("api_key"), INVALID_KEY, work=True)
        form = validated(DetectForm, present(params, ["q"]), missing, invalid)
        if not form.q:
            raise InvalidRequest(missing("q"), field="q")
        check_size([form.q])
        return [detection(found) for found in dispatch.detect(provider, form.q)]

    @route(app, "/translate_file", ["POST"], response_model=FileTranslated)
    async def translate_file(request: Request):
        """A multipart `file` (.txt, .html, .srt, .docx) translated by the documents layer; a URL to fetch it.
        The file is charged its size in bytes against the character quota."""
        params = await read_params(request)
        caller = caller_of(request, keys, params.first("api_key"), INVALID_KEY, work=True)
        upload = params.first("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest(missing("file"), field="file")
        form = validated(FileForm, present(params, ["source", "target"]), missing, invalid)
        check_languages(form.source, form.target)
        filename = PurePath(upload.filename or "file")
        if filename.suffix.lower() not in SUFFIXES:
            raise InvalidRequest("Invalid request: file format not supported", field="file", limit=list(SUFFIXES))
        data = await upload.read()
        source = None if dispatch.is_auto(form.source) else canonical(form.source)

        async def work():
            with keys.spending(caller, len(data)):
                translated = await dispatch.translate_file(provider, data, filename.suffix, source,
                                                           canonical(form.target))
            name = downloads.put(filename.name, translated)
            return FileTranslated(translatedFileUrl=f"{request.base_url}download_file/{quote(name)}")

        return await until_disconnect(request, work())

    @route(app, "/download_file/{name}", ["GET"])
    async def download_file(name: str):
        stored = downloads.get(name)
        if stored is None:
            raise FileNotFound(f"{name}: no such file (translated files are kept {settings.download_ttl_s:g} s)")
        return Response(stored.content, media_type="application/octet-stream",
                        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(stored.filename)}"})

    @route(app, "/languages", ["GET", "POST"], response_model=list[LanguageEntry])
    async def languages():
        languages = served()
        codes = list(dict.fromkeys(languages.sources + languages.targets))
        return [LanguageEntry(code=code, name=language_name(code), targets=languages.targets_of(code))
                for code in codes]

    @route(app, "/frontend/settings", ["GET"])
    async def frontend_settings():
        languages = served()
        target = languages.targets[0]
        return {"charLimit": settings.max_request_chars, "frontendTimeout": 500, "apiKeys": keys.required,
                "keyRequired": keys.required, "suggestions": False, "filesTranslation": True,
                "supportedFilesFormat": list(SUFFIXES),
                "language": {"source": {"code": "auto", "name": "Auto Detect"},
                             "target": {"code": target, "name": language_name(target)}}}

    @route(app, "/health", ["GET"])
    async def health():
        ok, detail = await provider.health(settings.health_stale_s)
        return JSONResponse({"status": "ok"} if ok else {"error": detail}, status_code=200 if ok else 503)

    return STYLE
