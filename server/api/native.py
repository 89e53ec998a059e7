"""The native /v1 API: its schemas mapped onto domain jobs, and domain results back onto its responses."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations as objects.
import inspect
from pathlib import PurePath
from typing import Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from model import written_as

from ..domain import (DecodeOptions, GenerationJob, GenerationResult, ModelInfo, TextOptions, TranslationJob,
                      TranslationResult)
from ..errors import ServerError
from ..front import dispatch, generation
from ..front.access import characters
from ..glossary_entries import Entries
from ..settings import Settings
from . import native_audio, native_documents
from .deps import authorize, caller, served
from .errors import naming
from .native_glossaries import job_glossary, json_object
from .resending import resendable
from .schemas import (Alternative, Detected, GenerateRequest, GenerateResponse, Language, ModelCard, ModelLimits,
                      ModelList, TranslateRequest, TranslateResponse, TranslationItem, Usage, request_schemas)
from .streaming import DONE, attachment, event_response, json_response, sse, until_disconnect


def translation_job(body: TranslateRequest, glossary: Entries = ()) -> TranslationJob:
    options = decode_options(body, num_beams=body.beam_size)
    split = body.split_sentences or ("1" if body.format == "text" else "nonewlines")
    text_options = TextOptions(format=body.format, split_sentences=split, ignore_tags=tuple(body.ignore_tags or ()),
                               non_splitting_tags=tuple(body.non_splitting_tags or ()),
                               splitting_tags=tuple(body.splitting_tags or ()))
    return TranslationJob(texts=tuple(body.text), fields=tuple(body.field_name(i) for i in range(len(body.text))),
                          source_lang=body.source_lang, target_lang=body.target_lang, options=options,
                          text_options=text_options, glossary=glossary)


def translate_response(result: TranslationResult, with_scores: bool) -> TranslateResponse:
    def translation(t):
        alternatives = [Alternative(text=a.text, score=a.score if with_scores else None) for a in t.alternatives]
        detected = t.detected and Detected(language=t.detected.language, confidence=t.detected.confidence)
        return TranslationItem(text=t.text, score=t.score if with_scores else None,
                               alternatives=alternatives or None, detected_language=detected)

    return TranslateResponse(model=result.model, translations=[translation(t) for t in result.texts],
                             usage=Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens))


def decode_options(body, **renamed) -> DecodeOptions:
    """The decoding knobs a body has under DecodeOptions' own names, and `renamed` ones (the API's name differs)."""
    knobs = DecodeOptions.__dataclass_fields__
    return DecodeOptions(**{name: getattr(body, name) for name in knobs if name in type(body).model_fields}, **renamed)


def generation_job(body: GenerateRequest) -> GenerationJob:
    return GenerationJob(text=body.text, options=decode_options(body), stop=tuple(body.stop or ()),
                         source_lang=body.source_lang, target_lang=body.target_lang)


def generate_response(result: GenerationResult) -> GenerateResponse:
    return GenerateResponse(model=result.model, text=result.text, finish_reason=result.finish_reason,
                            usage=Usage(input_tokens=result.input_tokens, output_tokens=result.output_tokens))


def model_card(info: ModelInfo, created: int) -> ModelCard:
    return ModelCard(
        id=info.id, created=created, family=info.family, languages=[lang.code for lang in info.target_languages],
        source_languages=[Language(code=lang.code, iso=lang.iso) for lang in info.source_languages],
        target_languages=[Language(code=lang.code, iso=lang.iso) for lang in info.target_languages],
        default_beam_size=info.default_beam_size, speech=info.speech, device=info.device, dtype=info.dtype,
        kernels=info.kernels, replicas=info.replicas,
        limits=ModelLimits(max_texts=info.max_texts, max_input_tokens=info.max_input_tokens,
                           max_new_tokens=info.max_new_tokens, max_beams=info.max_beams,
                           max_request_chars=info.max_request_chars, max_document_chars=info.max_document_chars,
                           max_generate_chars=info.max_generate_chars, max_audio_bytes=info.max_audio_bytes,
                           max_audio_seconds=info.max_audio_seconds))



async def translate(body: TranslateRequest, request: Request):
    state = served(request)
    naming(request, "text", num_beams="beam_size")
    glossary = await job_glossary(state, caller(request), body.glossary_id, body.glossary, body.source_lang,
                                  body.target_lang)

    async def work():
        result = await dispatch.translate(state.provider, translation_job(body, glossary), body.model,
                                          detect_missing=False,
                                          spending=state.keys.spending(caller(request), characters(body.text)))
        return json_response(translate_response(result, body.return_scores))

    return await until_disconnect(request, work())


async def translate_file(request: Request):
    """A document (multipart `file`) → the same document translated, in this request."""
    state = served(request)
    naming(request, "file")
    upload, fields = await native_documents.file_form(
        request, ("source_lang", "target_lang", "model", "glossary_id", "glossary"),
        lengths={"glossary": state.settings.max_body_bytes})
    glossary = await job_glossary(state, caller(request), fields.pop("glossary_id"),
                                  json_object(fields.pop("glossary"), "glossary"), fields["source_lang"],
                                  fields["target_lang"])
    name = PurePath(upload.filename or "file")
    data = await upload.read()

    async def work():
        parsed = await dispatch.read_document(state.provider, data, name.suffix)
        translated = await dispatch.translate_file(state.provider, parsed, **fields,
                                                   spending=state.keys.spending(caller(request), parsed.characters),
                                                   glossary=glossary)
        written = written_as(name.suffix)
        return attachment(translated, f"{name.stem}.translated{written}",
                          upload.content_type if written == name.suffix.lower() else "application/octet-stream")

    return await until_disconnect(request, work())


async def generate(body: GenerateRequest, request: Request):
    state = served(request)
    jobs, spending = [generation_job(body)], state.keys.spending(caller(request), characters([body.text]))
    if not body.stream:
        async def work():
            result, = await generation.generate(state.provider, jobs, body.model, spending=spending)
            return json_response(generate_response(result))

        return await until_disconnect(request, work())
    stream = await generation.stream(state.provider, jobs, body.model, spending=spending)
    return event_response(event_stream(stream.events))


async def event_stream(events):
    """/v1/generate's server-sent events: text pieces, then the finish reason and usage, then [DONE]; an error
    after the first event is sent as an event in the native error shape."""
    try:
        async for _, event in events:
            if event.finish_reason is None:
                yield sse({"text": event.text})
            else:
                usage = {"input_tokens": event.input_tokens, "output_tokens": event.output_tokens}
                yield sse({"text": "", "finish_reason": event.finish_reason, "usage": usage})
                yield DONE
    except ServerError as e:
        yield sse(e.body())
    finally:
        await events.aclose()


async def models(request: Request):
    state = served(request)
    return ModelList(data=[model_card(info, state.started) for info in state.provider.models()])


def with_body(handler: Callable, schema: type) -> Callable:
    """`handler` with its `body` read as `schema` (the request schemas carry this server's limits, so they are
    made when the app is)."""
    signature = inspect.signature(handler)

    async def endpoint(**kwargs):
        return await handler(**kwargs)

    endpoint.__signature__ = signature.replace(parameters=[
        p.replace(annotation=schema) if p.name == "body" else p for p in signature.parameters.values()])
    endpoint.__name__, endpoint.__doc__ = handler.__name__, handler.__doc__
    return endpoint


def router(settings: Settings, guarded: bool) -> APIRouter:
    """The /v1 routes, `guarded` by the caller's key (keys or limits configured); made with the app, as the request
    schemas carry this server's limits."""
    TranslateBody, GenerateBody = request_schemas(settings)
    routes = APIRouter(dependencies=[Depends(authorize)] if guarded else [])
    routes.add_api_route("/v1/translate", resendable(with_body(translate, TranslateBody)), methods=["POST"],
                         response_model=TranslateResponse, response_model_exclude_none=True)
    routes.add_api_route("/v1/translate/file", resendable(translate_file), methods=["POST"], response_class=Response,
                         openapi_extra=native_documents.form_schema("source_lang", "target_lang", "model",
                                                                    "glossary_id", "glossary"),
                         responses={200: {"content": {"application/octet-stream": {}}}})
    native_documents.add_routes(routes)
    native_audio.add_routes(routes)
    routes.add_api_route("/v1/generate", resendable(with_body(generate, GenerateBody)), methods=["POST"],
                         response_model=GenerateResponse, responses={200: {"content": {"text/event-stream": {}}}})
    routes.add_api_route("/v1/models", models, methods=["GET"], response_model=ModelList)
    return routes
