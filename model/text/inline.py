"""Inline marks (tags, runs, placeholders) inside translated text: a run of text is cut into units, each unit is
translated whole, and every mark is put back once, at the target word aligned with the source word it sat at.

A word alignment is a list of (source word index, target word index) pairs for one unit (words: word_spans(),
runs of word characters and runs of punctuation). The model gives it from the decoder's cross-attention
(model/alignment.py: each target word goes with the source word its tokens attend to most), for the units that
hold marks (`PreparedText.marked_units`); `alignment=None` maps word positions proportionally (word i of n → word
round(i·m/n) of m). An opening mark goes before the first target word aligned with a source word it wraps, a closing
one after the last target word aligned with a source word before it. Marks keep their source order (a mark is never put
before an earlier one): a tag is never dropped, duplicated or crossed with another; where the alignment reorders
words across a tag, the tag's span shrinks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Callable, Sequence

from .segment import Span, segment

Alignment = Sequence[tuple[int, int]]  # (source word index, target word index) pairs of one unit
SLACK = 16  # bytes a token may skip in the text: what the tokenizer normalized or could not spell (<unk>)
_WORD = re.compile(r"\w+|[^\w\s]+")  # words and runs of punctuation: a tag may close before a full stop


@dataclass(frozen=True)
class Mark:
    """Something to put back between words: `opens` attaches to the word after it, otherwise to the word before
    (a closing tag)."""

    offset: int  # in the run's text
    payload: Any  # what the caller renders: a tag's source text, a document run
    opens: bool = True


@dataclass
class Run:
    """A stretch of text between two block boundaries with the marks inside it, cut into units.

    `sources` gives, for each piece of `text` (offset, source text, text), what the source said: markup writes
    `&amp;` for `&`. Text outside every unit (whitespace, separators) comes back as that source."""

    text: str
    marks: list[Mark] = field(default_factory=list)  # by offset; equal offsets in source order
    sources: list[tuple[int, str, str]] | None = None  # None: the source is `text` itself
    spans: list[Span] | None = None  # set by cut()

    def cut(self, language: str | None, mode: str, fits: Callable[[str], bool] | None,
            max_word_pieces: int | None = None) -> list[str]:
        self.spans = segment(self.text, language, mode, fits, max_word_pieces)
        return [self.text[s.start:s.end] for s in self.spans if s.translate]

    def render(self, translations: Sequence[str], alignments: Sequence[Alignment | None],
               escape: Callable[[str], str] = str) -> list:
        """The run translated: output text (translations escaped, the rest as in the source) and marks, in order."""
        out, placed, translated = [], 0, iter(zip(translations, alignments))
        for span, inside in self._spans_with_marks():
            if span.translate:
                target, alignment = next(translated)
                marked = place(self.text[span.start:span.end], target, _shifted(inside, span.start), alignment)
                out += [escape(p) if isinstance(p, str) else p for p in marked]
            else:
                out += self._kept_with_marks(span, inside)
            placed += len(inside)
        return out + self.marks[placed:]  # marks at the very end, after the last span

    def holds_marks(self) -> list[bool]:
        """For each unit, whether marks go inside it (only those need a word alignment)."""
        return [bool(inside) for span, inside in self._spans_with_marks() if span.translate]

    def _spans_with_marks(self):
        """Each span with the marks that go with it: a mark at a unit's edge goes with the unit; marks are sorted,
        so each span takes a prefix of those left."""
        next_mark = 0
        for span in self.spans:
            first = next_mark
            while next_mark < len(self.marks) and (self.marks[next_mark].offset <= span.end if span.translate
                                                   else self.marks[next_mark].offset < span.end):
                next_mark += 1
            yield span, self.marks[first:next_mark]

    def source(self, start: int, end: int) -> str:
        """What the source said for text[start:end] (a piece cut in two gives its decoded part)."""
        if self.sources is None:
            return self.text[start:end]
        out = []
        for offset, raw, text in self.sources:
            if offset < end and start < offset + len(text):
                whole = start <= offset and offset + len(text) <= end
                out.append(raw if whole else text[max(start - offset, 0):end - offset])
        return "".join(out)

    def _kept_with_marks(self, span: Span, marks: list[Mark]) -> list:
        out, position = [], span.start
        for mark in marks:
            out += [self.source(position, mark.offset), mark]
            position = mark.offset
        return out + [self.source(position, span.end)]


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word of `text`, as alignments count words."""
    return [m.span() for m in _WORD.finditer(text)]


def token_words(text: str, spelled: Sequence[bytes]) -> list[list[int]]:
    """For each token, the words of `text` it spells (a token may end one word and start the next: "s."). Tokens
    are matched in order against the text's UTF-8 bytes, spaces skipped; a token that spells nothing found next
    (special and language tokens) belongs to no word."""
    data = text.encode()
    offsets = list(accumulate((len(c.encode()) for c in text), initial=0))  # char index → byte index
    word_at = [-1] * len(data)  # byte → word index
    for w, (start, end) in enumerate(word_spans(text)):
        word_at[offsets[start]:offsets[end]] = [w] * (offsets[end] - offsets[start])
    out, cursor = [], 0
    for token in spelled:
        piece = token.strip()
        while cursor < len(data) and data[cursor:cursor + 1].isspace():
            cursor += 1
        at = data.find(piece, cursor, cursor + len(piece) + SLACK) if piece else -1
        if at == -1:
            out.append([])
            continue
        out.append(sorted({word_at[i] for i in range(at, at + len(piece))} - {-1}))
        cursor = at + len(piece)
    return out


def _shifted(marks: list[Mark], start: int) -> list[Mark]:
    return [Mark(m.offset - start, m.payload, m.opens) for m in marks]


def _target_boundary(boundary: int, opens: bool, n_source: int, n_target: int,
                     alignment: Alignment | None) -> int:
    """Source word boundary (before source word `boundary`) → target word boundary. An opening mark goes before
    the target of the first aligned source word at or after it, a closing one after the target of the last
    aligned source word before it; without an alignment, proportionally."""
    if alignment is None:
        return round(boundary * n_target / n_source) if n_source else 0
    targets: dict[int, list[int]] = {}
    for s, t in alignment:
        if 0 <= s < n_source and 0 <= t < n_target:
            targets.setdefault(s, []).append(t)
    if opens:
        following = [min(targets[s]) for s in range(boundary, n_source) if s in targets]
        return following[0] if following else n_target
    preceding = [max(targets[s]) + 1 for s in range(boundary - 1, -1, -1) if s in targets]
    return preceding[0] if preceding else 0


def place(source: str, target: str, marks: list[Mark], alignment: Alignment | None = None) -> list:
    """`target` with `marks` (offsets in `source`) put between its words: a sequence of str and Mark. A mark
    glued to the next source word opens before a target word; any other mark follows the previous target word
    (and the space after it, if the source had one before the mark)."""
    if not marks:
        return [target] if target else []
    source_starts = [start for start, _ in word_spans(source)]
    words = word_spans(target)
    out, position = [], 0
    for mark in marks:
        glued_to_next = mark.offset < len(source) and not source[mark.offset].isspace()
        opens = mark.opens and glued_to_next
        boundary = _target_boundary(sum(1 for s in source_starts if s < mark.offset), opens, len(source_starts),
                                    len(words), alignment)
        if opens:
            at = words[boundary][0] if boundary < len(words) else len(target)
        else:
            at = words[boundary - 1][1] if boundary > 0 else 0
            spaced = mark.offset > 0 and source[mark.offset - 1].isspace()
            at += 1 if spaced and at < len(target) and target[at].isspace() else 0
        at = max(at, position)  # never before an earlier mark: tags keep their source order
        if at > position:
            out.append(target[position:at])
        out.append(mark)
        position = at
    return out + ([target[position:]] if position < len(target) else [])
