"""Sentence segmentation: a text → spans to translate and the separators between them, kept exactly.

    spans = segment("Hello. How are you?\n\nFine.", "en")
    # [Span(0, 6, True), Span(6, 7, False), Span(7, 19, True), Span(19, 21, False), Span(21, 26, True)]
    join(text, spans, ["Hallo.", "Wie geht es?", "Gut."])   # "Hallo. Wie geht es?\n\nGut."

Modes (DeepL's `split_sentences`): "1" splits at line breaks, then into sentences with sentencex in the source
language; "nonewlines" splits into sentences only (a line break inside a sentence stays in it); "0" keeps the
text as one unit. Whitespace around units is never sent to the model: it comes back as it was. A unit that
`fits` rejects (too many tokens for the model) is cut further: at clause punctuation, then between words, then
between characters, each chunk as long as still fits. A word cut into more than `max_word_pieces` pieces of
characters raises WordTooLong (a 100,000-character word would otherwise be hundreds of full-length sequences).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

import sentencex

SPLIT_MODES = ("0", "1", "nonewlines")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CLAUSE = re.compile(r".+?(?:[,;:](?=\s)|[，；：、]|$)", re.S)  # up to and with a clause mark, or to the end
_WORD = re.compile(r"\S+")
_CHAR = re.compile(r".", re.S)
_FINER = (_CLAUSE, _WORD, _CHAR)  # how an over-long unit is cut, coarsest first

Fits = Callable[[str], bool]


class WordTooLong(ValueError):
    """A word (no whitespace) that only many pieces of characters would fit."""

    def __init__(self, length: int, pieces: int, limit: int):
        super().__init__(f"a word of {length} characters without spaces would be cut into {pieces} pieces; at most "
                         f"{limit}")
        self.limit = limit


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    translate: bool  # False: whitespace or a line break between units, kept as it is


def segment(text: str, language: str | None, mode: str = "1", fits: Fits | None = None,
            max_word_pieces: int | None = None) -> list[Span]:
    """Spans covering `text` in order; `language` is an ISO 639 code (sentencex falls back for others)."""
    if mode not in SPLIT_MODES:
        raise ValueError(f"split_sentences must be one of {', '.join(SPLIT_MODES)}, got {mode!r}")
    if mode == "0":
        units = _cores(text, [(0, len(text))])
    else:
        lines = [(0, len(text))] if mode == "nonewlines" else _between(text, _LINE_BREAK)
        units = _cores(text, [s for start, end in lines for s in _sentences(text, start, end, language or "en")])
    if fits is not None and mode != "0":  # "0" asks for one unit: too long is the caller's error
        units = [piece for start, end in units for piece in _cut(text, start, end, fits, 0, max_word_pieces)]
    return _with_separators(len(text), units)


def join(text: str, spans: list[Span], translations: Iterable[str]) -> str:
    """The text with each translated span replaced by its translation, in order; separators as they were."""
    translated = iter(translations)
    return "".join(next(translated) if s.translate else text[s.start:s.end] for s in spans)


def _between(text: str, separator: re.Pattern) -> list[tuple[int, int]]:
    """The ranges between matches of `separator`."""
    ranges, start = [], 0
    for match in separator.finditer(text):
        ranges.append((start, match.start()))
        start = match.end()
    return ranges + [(start, len(text))]


def _sentences(text: str, start: int, end: int, language: str) -> list[tuple[int, int]]:
    """sentencex's sentences of text[start:end] as ranges (its pieces keep all whitespace, so they tile it)."""
    ranges, position = [], start
    for sentence in sentencex.segment(language, text[start:end]):
        ranges.append((position, position + len(sentence)))
        position += len(sentence)
    return ranges if position == end else [(start, end)]


def _cores(text: str, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each range without its surrounding whitespace; ranges of whitespace only dropped."""
    cores = []
    for start, end in ranges:
        piece = text[start:end]
        stripped = piece.lstrip()
        if stripped.strip():
            head = start + len(piece) - len(stripped)
            cores.append((head, head + len(stripped.rstrip())))
    return cores


def _cut(text: str, start: int, end: int, fits: Fits, level: int,
         max_word_pieces: int | None) -> list[tuple[int, int]]:
    """text[start:end] as chunks that fit: clauses, else words, else characters (a single character that does
    not fit is left to the caller's limit check)."""
    if fits(text[start:end]) or level == len(_FINER):
        return [(start, end)]
    pieces = _cores(text, ((start + m.start(), start + m.end()) for m in _FINER[level].finditer(text[start:end])))
    packed = _pack(text, pieces, fits)
    if _FINER[level] is _CHAR and max_word_pieces is not None and len(packed) > max_word_pieces:
        raise WordTooLong(end - start, len(packed), max_word_pieces)
    chunks = []
    for chunk in packed:
        chunks += _cut(text, *chunk, fits, level + 1, max_word_pieces) if chunk in pieces else [chunk]
    return chunks


def _pack(text: str, pieces: list[tuple[int, int]], fits: Fits) -> list[tuple[int, int]]:
    """Consecutive pieces joined greedily into the longest chunks that fit (galloping, then bisecting, so a long
    unit costs O(length · log length) in `fits`); a piece that fits alone is never split here."""
    chunks, i = [], 0
    while i < len(pieces):
        def fits_upto(j: int) -> bool:
            return fits(text[pieces[i][0]:pieces[j - 1][1]])

        good, step = i + 1, 1
        while good + step <= len(pieces) and fits_upto(good + step):
            good, step = good + step, step * 2
        bad = min(good + step, len(pieces) + 1)
        while bad - good > 1:
            middle = (good + bad) // 2
            good, bad = (middle, bad) if fits_upto(middle) else (good, middle)
        chunks.append((pieces[i][0], pieces[good - 1][1]))
        i = good
    return chunks


def _with_separators(length: int, units: list[tuple[int, int]]) -> list[Span]:
    spans, position = [], 0
    for start, end in units:
        if start > position:
            spans.append(Span(position, start, False))
        spans.append(Span(start, end, True))
        position = end
    return spans + ([Span(position, length, False)] if position < length else [])
