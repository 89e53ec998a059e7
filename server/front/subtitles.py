"""A transcript's segments written as subtitles: SubRip (.srt) and WebVTT (.vtt), one cue per segment, its timing
the segment's. (Reading .srt files to translate them is the documents layer's, model.read_file.)"""

from __future__ import annotations

from typing import Iterable, Protocol

SUBTITLE_FORMATS = ("srt", "vtt")


class Timed(Protocol):
    start: float  # seconds
    end: float
    text: str


def timestamp(seconds: float, decimal: str) -> str:
    """HH:MM:SS followed by `decimal` and milliseconds: SubRip writes a comma, WebVTT a full stop."""
    millis = round(max(seconds, 0.0) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    return f"{hours:02d}:{minutes:02d}:{millis // 1000:02d}{decimal}{millis % 1000:03d}"


def cue_text(text: str) -> str:
    """A segment's text as a cue holds it: no leading space (Whisper's tokens start words with one), and no blank
    line, which would end the cue."""
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


def cues(segments: Iterable[Timed]) -> list[tuple[Timed, str]]:
    """The segments that have text, each with its cue text: a cue without text would end the file for readers."""
    return [(s, text) for s in segments if (text := cue_text(s.text))]


def srt(segments: Iterable[Timed]) -> str:
    return "".join(f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{text}\n\n"
                   for i, (s, text) in enumerate(cues(segments), 1))


def vtt(segments: Iterable[Timed]) -> str:
    return "WEBVTT\n\n" + "".join(f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{text}\n\n"
                                  for s, text in cues(segments))


def subtitles(segments: Iterable[Timed], kind: str) -> str:
    """`segments` as a subtitle file of `kind` (one of SUBTITLE_FORMATS)."""
    return {"srt": srt, "vtt": vtt}[kind](segments)
