"""Speech's door, as dispatch is translation's: an audio file decoded within its limits, the speech model picked,
its 30-s windows decoded in the running batch, and the transcript's segments translated into subtitles.

    samples = await speech.read(provider, data)                        # 16 kHz mono; BadBody, BodyTooLarge, ...
    transcription = await speech.transcribe(provider, SpeechJob(samples, options), model)
    transcript = await speech.transcript(transcription.events)        # the events: segments, then the Transcript
    shown = await speech.captions(provider, SpeechJob(samples, options), "de", charge=...)   # subtitles: timings kept

A file's windows are decoded one after the other (where a window starts depends on where the last one's final
timestamp fell), each one sequence of the model's continuous batch, so many files share every decoder step.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import AsyncIterator, Awaitable, Callable

import numpy

from model import AudioTooLarge, AudioTooLong, BadAudio, Segment, Transcript, read_audio

from ..domain import SpeechJob
from ..errors import BadBody, BodyTooLarge, TooManySeconds
from . import dispatch
from .access import characters
from .language_support import serves
from .provider import ModelProvider
from .streams import opened
from .subtitles import cue_text

Event = Segment | Transcript  # a transcription's events: each segment as its window is decoded, the Transcript last


async def read(provider: ModelProvider, data: bytes) -> numpy.ndarray:
    """An uploaded file's samples, decoded off the event loop; each problem a typed error naming `file`."""
    settings = provider.settings
    try:
        return await asyncio.to_thread(read_audio, data, settings.max_audio_bytes, settings.max_audio_seconds)
    except AudioTooLarge as e:
        raise BodyTooLarge(str(e), field="file", limit=e.limit) from None
    except AudioTooLong as e:
        raise TooManySeconds(e.seconds, e.limit, e.at_least) from None
    except BadAudio as e:
        raise BadBody(f"file: {e}", field="file") from None


@dataclass(frozen=True)
class Transcription:
    model: str
    events: AsyncIterator[Event]


async def transcribe(provider: ModelProvider, job: SpeechJob, model: str | None = None) -> Transcription:
    """The job's events from its speech model (the one named, or the first served), opened (the first awaited) so
    that a refusal is a plain error. Closing `events` stops the transcription."""
    dispatch.check_beams(provider.settings, job.options.num_beams)
    served = await provider.get(model, speech=True)
    return Transcription(served.name, await opened(served.transcribe_events(job)))


async def transcript(events: AsyncIterator[Event]) -> Transcript:
    """The Transcript that ends `events` (closed however this ends: their sequences leave the batch)."""
    try:
        async for event in events:
            if isinstance(event, Transcript):
                return event
        raise RuntimeError("a transcription ended without its transcript")
    finally:
        await events.aclose()


@dataclass(frozen=True)
class Captions:
    """What subtitles of an audio show: its transcript, and the segments in the language asked for."""

    model: str  # the speech model
    transcript: Transcript
    segments: tuple[Segment, ...]  # the transcript's, or their translations (timings kept)
    translated: bool


async def captions(provider: ModelProvider, job: SpeechJob, target_lang: str | None, *,
                   charge: Callable[[int], AbstractAsyncContextManager], model: str | None = None,
                   translation_model: str | None = None, chunk_chars: int | None = None,
                   progress: Callable[[float], Awaitable[None]] | None = None,
                   glossary: tuple[tuple[str, str], ...] = ()) -> Captions:
    """The job's transcript by its speech model (`model`, or the first served), and its segments translated into
    `target_lang` by the served translation models where it names another language than the spoken one: the cues'
    texts, within the request's limits (not max_texts) as a subtitle file's, `charge(their characters)` entered
    around their translation (as a file's, in consecutive requests of `chunk_chars`, `progress` after each)."""
    transcription = await transcribe(provider, job, model)
    spoken = await transcript(transcription.events)
    if not target_lang or serves((spoken.language,), target_lang, "target"):
        return Captions(transcription.model, spoken, spoken.segments, translated=False)
    texts = [cue_text(segment.text) for segment in spoken.segments]
    translations = await dispatch.translate_texts(provider, texts, spoken.language, target_lang, translation_model,
                                                  spending=charge(characters(texts)), chunk_chars=chunk_chars,
                                                  progress=progress, glossary=glossary)
    segments = tuple(replace(segment, text=text) for segment, text in zip(spoken.segments, translations))
    return Captions(transcription.model, spoken, segments, translated=True)
