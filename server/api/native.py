"""The native /v1 API: its schemas mapped onto domain jobs, and domain results back onto its responses."""

# No `from __future__ import annotations`: the routes' body types are built from the settings at run time and
# FastAPI must see them as objects, not as names to resolve.
from pathlib import PurePath
from typing import Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import dispatch
from .domain import (DecodeOptions, GenerationJob, GenerationResult, ModelInfo, TextOptions, TranslationJob,
                     TranslationResult)
from .errors import BadBody, InvalidRequest, ServerError
from .schemas import (Alternative, Detected, GenerateRequest, GenerateResponse, Language, ModelCard, ModelLimits,
                      ModelList, TranslateRequest, TranslateResponse, Translation, Usage, request_schemas)
from .settings import Settings
from .streaming import json_response, sse, until_disconnect


def translation_job(body: TranslateRequest) -> TranslationJob:
    options = DecodeOptions(max_new_tokens=body.max_new_tokens, num_beams=body.beam_size,
                            length_penalty=body.length_penalty, n_best=body.n_best)
    split = body.split_sentences or ("1" if body.format == "text" else "nonewlines")
    text_options = TextOptions(format=body.format, split_sentences=split, ignore_tags=tuple(body.ignore_tags or ()),
                               non_splitting_tags=tuple(body.non_splitting_tags or ()),
                               splitting_tags=tuple(body.splitting_tags or ()))
    return TranslationJob(texts=tuple(body.text), fields=tuple(body.field_name(i) for i in range(len(body.text))),
                          source_lang=body.source_lang, target_lang=body.target_lang, options=options,
                          text_options=text_options)


def translate_response(result: TranslationResult, with_scores: bool) -> TranslateResponse:
    def translation(t):
        alternatives = [Alternative(text=a.text, score=a.score if with_scores else None) for a in t.alternatives]
        detected = t.detected and Detected(language=t.detected.language, confidence=t.detected.confidence)
        return Translation(text=t.text, score=t.score if with_scores else None, alternatives=alternatives or None,
                           detected_language=detected)

    return TranslateResponse(model=result.model, translations=[translation(t) for t in result.texts],
                             usage=Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens))


def generation_job(body: GenerateRequest) -> GenerationJob:
    options = DecodeOptions(max_new_tokens=body.max_new_tokens, num_beams=body.num_beams,
                            length_penalty=body.length_penalty, temperature=body.temperature, top_k=body.top_k,
                            top_p=body.top_p, seed=body.seed, repetition_penalty=body.repetition_penalty,
                            no_repeat_ngram_size=body.no_repeat_ngram_size, min_new_tokens=body.min_new_tokens)
    return GenerationJob(text=body.text, options=options, stop=tuple(body.stop or ()), source_lang=body.source_lang,
                         target_lang=body.target_lang)


def generate_response(result: GenerationResult) -> GenerateResponse:
    return GenerateResponse(model=result.model, text=result.text, finish_reason=result.finish_reason,
                            usage=Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens))


def model_card(info: ModelInfo) -> ModelCard:
    return ModelCard(
        id=info.id, family=info.family, languages=[lang.code for lang in info.target_languages],
        source_languages=[Language(code=lang.code, iso=lang.iso) for lang in info.source_languages],
        target_languages=[Language(code=lang.code, iso=lang.iso) for lang in info.target_languages],
        default_beam_size=info.default_beam_size,
        limits=ModelLimits(max_texts=info.max_texts, max_input_tokens=info.max_input_tokens,
                           max_new_tokens=info.max_new_tokens, max_beams=info.max_beams))


FILE_FORM = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"],
    "properties": {"file": {"type": "string", "format": "binary", "description": ".txt, .html, .srt or .docx"},
                   "source_lang": {"type": "string", "maxLength": 32}, "target_lang": {"type": "string", "maxLength": 32},
                   "model": {"type": "string", "maxLength": 200}}}}}}}


def _form_text(form, name: str, max_length: int = 200) -> str | None:
    value = form.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > max_length):
        raise InvalidRequest(f"{name}: a text of at most {max_length} characters", field=name, limit=max_length)
    return value or None


def add_native_routes(app: FastAPI, provider, authorize: Callable | None, settings: Settings) -> None:
    """The /v1 routes on `app` itself (FastAPI's included routers hide the route template from middleware)."""
    router = app.router
    TranslateBody, GenerateBody = request_schemas(settings)
    guarded = dict(dependencies=[Depends(authorize)] if authorize else [])

    @router.post("/v1/translate", response_model=TranslateResponse, response_model_exclude_none=True, **guarded)
    async def translate(body: TranslateBody, request: Request):
        async def work():
            result = await dispatch.translate(provider, translation_job(body), body.model, detect_missing=False)
            return json_response(translate_response(result, body.return_scores))

        return await until_disconnect(request, work())

    @router.post("/v1/translate/file", **guarded, response_class=Response, openapi_extra=FILE_FORM,
                 responses={200: {"content": {"application/octet-stream": {}}}})
    async def translate_file(request: Request):
        """A .txt, .html, .srt or .docx file (multipart `file`) → the same file translated."""
        # the form is read here, after the guard: the key check has read (and cached) the body already
        try:
            form = await request.form()
        except StarletteHTTPException as e:  # Starlette's answer to a malformed multipart body
            raise BadBody(f"the body is not a valid multipart form: {e.detail}", field="body") from None
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("file: a multipart file field is required", field="file")
        fields = {name: _form_text(form, name) for name in ("source_lang", "target_lang", "model")}
        name = PurePath(upload.filename or "file")

        async def work():
            translated = await dispatch.translate_file(provider, await upload.read(), name.suffix, **fields)
            download = quote(f"{name.stem}.translated{name.suffix}")  # no quotes or line breaks reach the header
            return Response(translated, media_type=upload.content_type or "application/octet-stream",
                            headers={"Content-Disposition": f"attachment; filename*=UTF-8''{download}"})

        return await until_disconnect(request, work())

    @router.post("/v1/generate", response_model=GenerateResponse, **guarded,
                 responses={200: {"content": {"text/event-stream": {}}}})
    async def generate(body: GenerateBody, request: Request):
        service = await provider.get(body.model, body.source_lang, body.target_lang)
        job = generation_job(body)
        if not body.stream:
            async def work():
                return json_response(generate_response(await service.generate(job)))

            return await until_disconnect(request, work())
        events = service.generate_events(job)
        first = await anext(events)  # validation and queueing errors surface here, as plain HTTP errors

        async def stream():
            event = first
            try:
                while True:
                    if event.finish_reason is None:
                        yield sse({"text": event.text})
                    else:
                        usage = {"input_tokens": event.input_tokens, "output_tokens": event.output_tokens}
                        yield sse({"text": "", "finish_reason": event.finish_reason, "usage": usage})
                        yield "data: [DONE]\n\n"
                        return
                    event = await anext(events)
            except ServerError as e:
                yield sse(e.body())
            finally:
                await events.aclose()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @router.get("/v1/models", response_model=ModelList, **guarded)
    async def models():
        return ModelList(models=[model_card(info) for info in provider.models()])
