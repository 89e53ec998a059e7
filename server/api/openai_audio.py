"""OpenAI's audio API over the front's speech door (front.speech): `POST /v1/audio/transcriptions` and
`/v1/audio/translations` (into English, the speech model's own translate task), multipart as the official client
sends them: `file`, `model`, `language` (transcriptions), `prompt`, `temperature` (0: Whisper's fallback,
model.speech), `response_format` (json, text, srt, vtt, verbose_json), `timestamp_granularities[]` (segment, word:
verbose_json's `segments` and `words`, as OpenAI's, segments alone when none is named; word only with verbose_json)
and `stream` (json and text: `transcript.text.delta` events, one a segment, then `transcript.text.done`).

`model` names a served speech model; OpenAI's own name `whisper-1`, when no model has that name, is the first one.
Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}`, as the completions' (openai.STYLE's table).
"""

from __future__ import annotations

from typing import AsyncIterator, Literal

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from model import Segment, SpeechOptions, Transcript, compression_ratio

from ..domain import SpeechJob
from ..errors import InvalidRequest, ServerError
from ..front import speech
from ..front.served_languages import language_name
from ..front.subtitles import SUBTITLE_FORMATS, subtitles
from . import openai
from .deps import caller_of, served
from .errors import ErrorStyle, openai_body
from .reading import read_params, validated
from .streaming import event_response, sse, until_disconnect

PATHS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
OPENAI_MODEL = "whisper-1"  # what OpenAI's clients and the tools on them send


def owns(path: str) -> bool:
    return path in PATHS


STYLE = ErrorStyle(openai_body, owns, openai.STYLE.table)
router = STYLE.router()


class AudioRequest(BaseModel):
    """The form's fields besides `file` (unknown fields, such as `include[]`, are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    language: str | None = Field(None, max_length=32)
    prompt: str | None = Field(None, max_length=2_000)
    temperature: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    response_format: Literal["json", "text", "srt", "vtt", "verbose_json"] = "json"
    timestamp_granularities: list[Literal["segment", "word"]] = Field(default_factory=list, max_length=2)
    stream: bool = False


@router.post("/v1/audio/transcriptions")
async def transcriptions(request: Request):
    return await answer(request, "transcribe")


@router.post("/v1/audio/translations")
async def translations(request: Request):
    return await answer(request, "translate")


async def answer(request: Request, task: str):
    state = served(request)
    await caller_of(request, openai.BEARER, work=True)
    upload, body = await read(request)
    samples = await speech.read(state.provider, await upload.read())
    # OpenAI's translations take no language: the spoken one is detected. Timestamps in every format, as Whisper's
    # own transcribe decodes, so that json's text is verbose_json's.
    # Temperature 0 is OpenAI's "raised while the thresholds fail": Whisper's own fallback.
    choices = dict(task=task, language=body.language if task == "transcribe" else None, prompt=body.prompt,
                   word_timestamps="word" in body.timestamp_granularities)
    options = (SpeechOptions.with_fallback(**choices) if body.temperature == 0
               else SpeechOptions(**choices, temperature=body.temperature))
    job, model = SpeechJob(samples, options), speech_model(request, body.model)
    if body.stream:
        return event_response(deltas((await speech.transcribe(state.provider, job, model)).events))

    async def work():
        transcript = await speech.transcript((await speech.transcribe(state.provider, job, model)).events)
        return response(transcript, body, task)

    return await until_disconnect(request, work())


def speech_model(request: Request, name: str) -> str | None:
    """The model named; OpenAI's `whisper-1`, where no served model has that name, is the first speech model
    (None)."""
    served_names = {info.id for info in served(request).provider.models()}
    return None if name == OPENAI_MODEL and name not in served_names else name


async def read(request: Request) -> tuple[UploadFile, AudioRequest]:
    params = await read_params(request)
    upload = params.first("file")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("file: a multipart file field is required", field="file")
    data = {name: params.first(name) for name in params.values if name != "file"}
    data["timestamp_granularities"] = params.many("timestamp_granularities[]") + params.many("timestamp_granularities")
    body = validated(AudioRequest, data, lambda name: f"{name}: a required parameter is missing",
                     lambda name, why: f"{name}: {why}")
    if "word" in body.timestamp_granularities and body.response_format != "verbose_json":
        raise InvalidRequest(f"timestamp_granularities[]: word timestamps need response_format 'verbose_json', not "
                             f"{body.response_format!r}", field="timestamp_granularities[]")
    if body.stream and body.response_format not in ("json", "text"):
        raise InvalidRequest(f"stream: not with response_format {body.response_format!r} (json or text)",
                             field="stream")
    return upload, body


def response(transcript: Transcript, body: AudioRequest, task: str):
    usage = {"type": "duration", "seconds": transcript.duration}
    if body.response_format == "json":
        return JSONResponse({"text": transcript.text, **({"usage": usage} if task == "transcribe" else {})})
    if body.response_format == "text":
        return PlainTextResponse(transcript.text)
    if body.response_format in SUBTITLE_FORMATS:
        return PlainTextResponse(subtitles(transcript.segments, body.response_format))
    return JSONResponse(verbose_json(transcript, task, body.timestamp_granularities or ["segment"], usage))


def verbose_json(transcript: Transcript, task: str, granularities: list[str], usage: dict) -> dict:
    """OpenAI's TranscriptionVerbose: `segments` and `words` as the granularities name them (a word without its
    leading space, as OpenAI's)."""
    answer = {"task": task, "language": language_name(transcript.language).lower(), "duration": transcript.duration,
              "text": transcript.text}
    if "segment" in granularities:
        answer["segments"] = [segment_json(i, s) for i, s in enumerate(transcript.segments)]
    if "word" in granularities:
        answer["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end}
                           for segment in transcript.segments for w in segment.words]
    return answer | {"usage": usage}


def segment_json(index: int, segment: Segment) -> dict:
    """A verbose_json segment, every field of OpenAI's (the client's TranscriptionSegment)."""
    return {"id": index, "seek": segment.seek, "start": segment.start, "end": segment.end, "text": segment.text,
            "tokens": list(segment.token_ids), "temperature": segment.temperature, "avg_logprob": segment.avg_logprob,
            "compression_ratio": compression_ratio(segment.text), "no_speech_prob": segment.no_speech_prob}


async def deltas(events: AsyncIterator) -> AsyncIterator[str]:
    """OpenAI's transcription events: a `transcript.text.delta` per segment, then `transcript.text.done`; an error
    after the first is an event in OpenAI's error shape (the client raises it)."""
    try:
        async for event in events:
            if isinstance(event, Segment):
                yield sse({"type": "transcript.text.delta", "delta": event.text, "logprobs": None})
            else:
                yield sse({"type": "transcript.text.done", "text": event.text, "logprobs": None})
    except ServerError as e:
        yield sse(STYLE.payload(e))
    finally:
        await events.aclose()

