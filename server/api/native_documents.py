"""The native API's document jobs (the same jobs as DeepL's document routes): `POST /v1/documents` (multipart:
file, target_lang, source_lang?, output_format?, model?, glossary_id? or glossary?, as /v1/translate/file takes
them; an audio file becomes subtitles, .srt or output_format vtt, its source_lang the spoken language, its model the
translation model) → 202 `{document_id, document_key, status}`; `GET /v1/documents/{id}` → its status and progress;
`GET /v1/documents/{id}/result` → the translated file, once. The document key travels in the `X-Document-Key`
header (never in a URL, which logs keep). Errors in the native shape: 404 for an unknown id, key or caller, 503
`not_ready` before the file is done.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations as objects.
from pathlib import PurePath
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from model import SUFFIXES

from ..document_store import Job
from ..errors import BadBody, InvalidRequest
from ..front import dispatch
from ..front.document_jobs import DOCUMENT_SUFFIXES
from ..front.served_languages import check_served
from .deps import caller, served
from .native_glossaries import job_glossary, json_object
from .streaming import attachment

PATHS = frozenset({"/v1/documents"})  # takes audio files: its body limit is max_audio_bytes
KEY_HEADER = "x-document-key"
FIELD_LENGTH = 200  # characters of a form's text field (languages, a model's name)


class DocumentSubmitted(BaseModel):
    document_id: str
    document_key: str  # shown once: it and the id find the document
    status: Literal["queued"] = "queued"


class DocumentProgress(BaseModel):
    document_id: str
    filename: str
    status: Literal["queued", "translating", "done", "error"]
    characters: int
    progress: float  # 0..1, of the characters
    seconds_remaining: int | None = None
    error_message: str | None = None


def owner(request: Request) -> str:
    """The caller (its key's hash) where keys are required, else its address, as every API counts callers."""
    state = served(request)
    return caller(request) or state.keys.caller(None, request.client and request.client.host)


async def file_form(request: Request, names: tuple[str, ...],
                    lengths: dict[str, int] | None = None) -> tuple[UploadFile, dict[str, str | None]]:
    """A multipart form's `file` and its text fields `names` (None where not given), each of at most FIELD_LENGTH
    characters or its `lengths`."""
    try:
        form = await request.form()
    except StarletteHTTPException as e:  # Starlette's answer to a malformed multipart body
        raise BadBody(f"the body is not a valid multipart form: {e.detail}", field="body") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("file: a multipart file field is required", field="file")
    return upload, {name: form_text(form, name, (lengths or {}).get(name, FIELD_LENGTH)) for name in names}


def form_schema(*names: str, suffixes: tuple[str, ...] = SUFFIXES) -> dict:
    """The OpenAPI description of a multipart form: `file` (of one of `suffixes`) and the text fields `names`."""
    fields = {name: {"type": "string", "maxLength": FIELD_LENGTH} for name in names}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["file"],
        "properties": {"file": {"type": "string", "format": "binary", "description": ", ".join(suffixes)},
                       **fields}}}}}}


def form_text(form, name: str, max_length: int = FIELD_LENGTH) -> str | None:
    value = form.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > max_length):
        raise InvalidRequest(f"{name}: a text of at most {max_length} characters", field=name, limit=max_length)
    return value or None


async def submit(request: Request):
    """A file queued for translation (.txt, .html, .srt, .docx, ...; audio made subtitles): poll its status, then
    fetch its result."""
    state = served(request)
    upload, fields = await file_form(request, ("source_lang", "target_lang", "output_format", "model", "glossary_id",
                                               "glossary"), lengths={"glossary": state.settings.max_body_bytes})
    await dispatch.check_model(state.provider, fields["model"])
    if dispatch.is_auto(fields["source_lang"], detect_missing=False):
        fields["source_lang"] = None  # the model's own source: a document's language is not detected (audio's is)
    check_served(state.provider, fields["source_lang"], fields["target_lang"])
    glossary = await job_glossary(state, caller(request), fields["glossary_id"],
                                  json_object(fields["glossary"], "glossary"), fields["source_lang"],
                                  fields["target_lang"])
    document_id, key = await state.jobs.submit(owner(request), await upload.read(),
                                               PurePath(upload.filename or "file").name, fields["source_lang"],
                                               fields["target_lang"], fields["output_format"], fields["model"],
                                               glossary)
    return DocumentSubmitted(document_id=document_id, document_key=key)


async def owned(request: Request, document_id: str) -> Job:
    key = request.headers.get(KEY_HEADER)
    if not key:
        raise InvalidRequest(f"the document key is required in the {KEY_HEADER} header", field=KEY_HEADER)
    return await served(request).jobs.owned(document_id, key, owner(request))


async def status(document_id: str, request: Request):
    job = await owned(request, document_id)
    return DocumentProgress(document_id=job.id, filename=job.filename, status=job.status, characters=job.characters,
                            progress=job.characters_done / job.characters if job.characters
                            else float(job.status == "done"),  # none counted yet (an audio job before its transcript)
                            seconds_remaining=served(request).jobs.seconds_remaining(job),
                            error_message=job.error_message)


async def result(document_id: str, request: Request):
    job = await owned(request, document_id)
    written = PurePath(job.download_name)
    return attachment(await served(request).jobs.download(job), f"{written.stem}.translated{written.suffix}")


def add_routes(routes: APIRouter) -> None:
    routes.add_api_route("/v1/documents", submit, methods=["POST"], status_code=202,
                         response_model=DocumentSubmitted,
                         openapi_extra=form_schema("source_lang", "target_lang", "model", "output_format",
                                                   "glossary_id", "glossary", suffixes=DOCUMENT_SUFFIXES))
    routes.add_api_route("/v1/documents/{document_id}", status, methods=["GET"], response_model=DocumentProgress,
                         response_model_exclude_none=True)
    routes.add_api_route("/v1/documents/{document_id}/result", result, methods=["GET"],
                         responses={200: {"content": {"application/octet-stream": {}}}})
