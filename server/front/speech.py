"""Speech's door, as dispatch is translation's: an audio file decoded within its limits, the speech model picked,
its 30-s windows decoded in the running batch, and the transcript's segments translated into subtitles.

    samples = await speech.read(provider, data)                        # 16 kHz mono; BadBody, BodyTooLarge, ...
    transcription = await speech.transcribe(provider, SpeechJob(samples, options), model)
    transcript = await speech.transcript(transcription.events)        # the events: segments, then the Transcript
    segments = await speech.translated(provider, transcript, "de", spending=...)     # timings kept

A file's windows are decoded one after the other (where a window starts depends on where the last one's final
timestamp fell), each one sequence of the model's continuous batch, so many files share every decoder step.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import AsyncIterator

import numpy

from model import AudioTooLarge, AudioTooLong, BadAudio, Segment, Transcript, read_audio

from ..domain import SpeechJob
from ..errors import BadBody, BodyTooLarge, TooManyBeams, TooManySeconds
from . import dispatch
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
    settings = provider.settings
    if job.options.num_beams is not None and job.options.num_beams > settings.beam_limit:
        raise TooManyBeams(job.options.num_beams, settings.beam_limit)
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


async def translated(provider: ModelProvider, transcript: Transcript, target_lang: str, model: str | None = None,
                     spending: AbstractAsyncContextManager = nullcontext()) -> tuple[Segment, ...]:
    """The transcript's segments with their texts translated from its language into `target_lang` by the served
    translation models (as a subtitle file's cues: within the request's limits, not max_texts), timings kept."""
    texts = [cue_text(segment.text) for segment in transcript.segments]
    translations = await dispatch.translate_texts(provider, texts, transcript.language, target_lang, model,
                                                  spending=spending)
    return tuple(replace(segment, text=text) for segment, text in zip(transcript.segments, translations))
