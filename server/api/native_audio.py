"""The native API's speech route: `POST /v1/transcribe` (multipart: `file`, `model`?, `language`?, `task`?
transcribe | translate (into English, the speech model's own), `prompt`?, `target_lang`? with `translation_model`?,
`format`? json | text | srt | vtt, `word_timestamps`? false | true: json's segments with their `words`) → the
transcript, or subtitles; with `target_lang` its segments are translated by the served translation models, their
timings kept (and their words the spoken ones). Errors in the native shape, as every /v1 route's."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations as objects.
from pathlib import PurePath

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel

from model import AUDIO_SUFFIXES, SpeechOptions

from ..domain import SpeechJob
from ..errors import InvalidRequest
from ..front import speech
from ..front.subtitles import SUBTITLE_FORMATS, cue_text, subtitles
from .deps import caller, served
from .native_documents import file_form, form_schema
from .streaming import attachment, until_disconnect

PATHS = frozenset({"/v1/transcribe"})
FIELDS = ("model", "language", "task", "prompt", "target_lang", "translation_model", "format", "word_timestamps")
FORMATS = ("json", "text", *SUBTITLE_FORMATS)
TASKS = ("transcribe", "translate")
MEDIA = {"srt": "application/x-subrip", "vtt": "text/vtt"}


class TimedWord(BaseModel):
    start: float  # seconds
    end: float
    word: str  # as spoken (the transcript's language), without its leading space
    probability: float


class TimedText(BaseModel):
    start: float  # seconds
    end: float
    text: str
    words: list[TimedWord] | None = None  # with word_timestamps


class TranscribeResponse(BaseModel):
    model: str  # the speech model
    language: str  # the spoken language (the speech model's code)
    duration: float  # seconds of audio
    text: str  # in target_lang when one was given
    segments: list[TimedText]
    target_lang: str | None = None


def choice(fields: dict, name: str, allowed: tuple[str, ...]) -> str:
    value = fields[name] or allowed[0]
    if value not in allowed:
        raise InvalidRequest(f"{name}: {value!r} is not one of {', '.join(allowed)}", field=name, limit=list(allowed))
    return value


async def transcribe(request: Request):
    """Speech → its transcript (json, text) or subtitles (srt, vtt), in its language or in `target_lang`."""
    state = served(request)
    upload, fields = await file_form(request, FIELDS, lengths={"prompt": 2_000})
    kind, task = choice(fields, "format", FORMATS), choice(fields, "task", TASKS)
    words = choice(fields, "word_timestamps", ("false", "true")) == "true"
    if words and kind != "json":
        raise InvalidRequest(f"word_timestamps: words come with format 'json', not {kind!r}", field="word_timestamps")
    samples = await speech.read(state.provider, await upload.read())
    # Whisper's own decoding, its temperature fallback included, as OpenAI's route at temperature 0; timestamps: always
    options = SpeechOptions.with_fallback(task=task, language=fields["language"], prompt=fields["prompt"],
                                          word_timestamps=words)

    async def work():
        target = fields["target_lang"]
        shown = await speech.captions(state.provider, SpeechJob(samples, options), target,
                                      charge=lambda count: state.keys.spending(caller(request), count),
                                      model=fields["model"], translation_model=fields["translation_model"])
        transcript, segments = shown.transcript, shown.segments
        text = " ".join(cue_text(s.text) for s in segments) if shown.translated else transcript.text
        if kind in SUBTITLE_FORMATS:
            name = f"{PurePath(upload.filename or 'speech').stem}.{target or transcript.language}.{kind}"
            return attachment(subtitles(segments, kind).encode("utf-8"), name, MEDIA[kind])
        if kind == "text":
            return PlainTextResponse(text)
        return TranscribeResponse(
            model=shown.model, language=transcript.language, duration=transcript.duration, text=text,
            segments=[TimedText(start=s.start, end=s.end, text=cue_text(s.text),
                                words=[TimedWord(start=w.start, end=w.end, word=w.word.strip(),
                                                 probability=w.probability) for w in s.words] if words else None)
                      for s in segments],
            target_lang=target)

    return await until_disconnect(request, work())


def add_routes(routes: APIRouter) -> None:
    routes.add_api_route("/v1/transcribe", transcribe, methods=["POST"], response_model=TranscribeResponse,
                         response_model_exclude_none=True, openapi_extra=form_schema(*FIELDS, suffixes=AUDIO_SUFFIXES),
                         responses={200: {"content": {"text/plain": {}, **{m: {} for m in MEDIA.values()}}}})
