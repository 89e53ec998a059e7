"""DeepL's document API over the document jobs (front.document_jobs), as the official `deepl` clients call it:
`POST /v2/document` (multipart: file, target_lang, source_lang?, formality?, glossary_id?, output_format?) →
`{document_id, document_key}`; `POST /v2/document/{id}` with `{document_key}` → `{document_id, status,
seconds_remaining?, billed_characters?, error_message?}`; `POST /v2/document/{id}/result` → the file once, then the
job is gone. `glossary_id` keeps its terms in every part of the document, refused at upload as /v2/translate refuses
it. An unknown id, or a key or caller not its own, is a 404; a result asked for before it is done a 503
"Document translation is not done" (the client's DocumentNotReadyException). Errors in DeepL's shape (deepl.STYLE).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Literal

from fastapi import Request
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile

from ..document_store import Job
from ..errors import InvalidRequest
from ..front.document_jobs import check_file_type
from ..front.served_languages import canonical, check_served
from .deepl import STYLE, caller, glossary_terms, invalid, missing
from .deps import served
from .reading import present, validated
from .streaming import attachment

router = STYLE.router()


class DocumentForm(BaseModel):
    target_lang: str = Field(min_length=1, max_length=32)
    source_lang: str | None = Field(None, max_length=32)
    formality: Literal["default", "more", "less", "prefer_more", "prefer_less"] | None = None
    glossary_id: str | None = None
    output_format: str | None = Field(None, max_length=16)


class DocumentStatus(BaseModel):
    document_id: str
    status: Literal["queued", "translating", "done", "error"]
    seconds_remaining: int | None = None
    billed_characters: int | None = None
    error_message: str | None = None


@router.post("/v2/document")
async def upload(request: Request):
    state = served(request)
    who, params = await caller(request, work=True)
    file = params.first("file")
    if not isinstance(file, UploadFile):
        raise InvalidRequest(missing("file"), field="file")
    form = validated(DocumentForm, present(params, list(DocumentForm.model_fields)), missing, invalid)
    check_served(state.provider, form.source_lang, form.target_lang)
    glossary = await glossary_terms(request, who, form.glossary_id, form.source_lang, form.target_lang)
    filename = PurePath(file.filename or "file").name
    check_file_type(filename)
    document_id, key = await state.jobs.submit(
        who, await file.read(), filename, canonical(form.source_lang) if form.source_lang else None,
        canonical(form.target_lang), form.output_format, glossary=glossary)
    return {"document_id": document_id, "document_key": key}


async def owned_job(request: Request, document_id: str) -> Job:
    who, params = await caller(request)
    key = params.first("document_key")
    if not isinstance(key, str) or not key:
        raise InvalidRequest(missing("document_key"), field="document_key")
    return await served(request).jobs.owned(document_id, key, who)


@router.post("/v2/document/{document_id}", response_model=DocumentStatus)
async def status(document_id: str, request: Request):
    job = await owned_job(request, document_id)
    return DocumentStatus(document_id=job.id, status=job.status,
                          seconds_remaining=served(request).jobs.seconds_remaining(job),
                          billed_characters=job.characters if job.status == "done" else None,
                          error_message=job.error_message)


@router.post("/v2/document/{document_id}/result")
async def result(document_id: str, request: Request):
    job = await owned_job(request, document_id)
    return attachment(await served(request).jobs.download(job), job.download_name)
