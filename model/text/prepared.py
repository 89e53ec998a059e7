"""A text (plain, HTML or XML) prepared for translation: the units to translate, and the text rebuilt from their
translations.

    prepared = prepare(text, "en", format="html", split_sentences="nonewlines", fits=lambda s: tokens(s) <= 256)
    translations = my_model(prepared.units)
    output = prepared.render(translations)            # alignments=[...] per unit when the model gives them

Only the units that hold inline marks (`marked_units()`) need an alignment; the others render the same without.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

from .inline import Alignment, Mark, Run
from .markup import FORMATS, escaper, parts

T = TypeVar("T")


@dataclass
class PreparedText:
    parts: list[str | Run]  # str: source kept as it is
    escape: Callable[[str], str]
    units: list[str] = field(default_factory=list)

    def render(self, translations: Sequence[str], alignments: Sequence[Alignment | None] | None = None) -> str:
        if len(translations) != len(self.units):
            raise ValueError(f"{len(translations)} translations for {len(self.units)} units")
        alignments = alignments or [None] * len(translations)
        out, position = [], 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            count = sum(1 for s in part.spans if s.translate)
            rendered = part.render(translations[position:position + count], alignments[position:position + count],
                                   self.escape)
            out += [p.payload if isinstance(p, Mark) else p for p in rendered]
            position += count
        return "".join(out)

    def marked_units(self) -> list[int]:
        """Indices (in `units`) of the units with inline marks inside: the ones whose alignment matters."""
        holds = [h for part in self.parts if isinstance(part, Run) for h in part.holds_marks()]
        return [i for i, h in enumerate(holds) if h]


def prepare(text: str, language: str | None, format: str = "text", split_sentences: str = "1",
            ignore_tags: Sequence[str] = (), non_splitting_tags: Sequence[str] = (),
            splitting_tags: Sequence[str] = (), fits: Callable[[str], bool] | None = None,
            max_word_pieces: int | None = None) -> PreparedText:
    """`language`: the source's ISO 639 code, for sentence rules. Raises ValueError for an unknown format or
    split mode, markup.MarkupError for XML that is not well-formed or declares a DTD, and segment.WordTooLong
    for a word cut into more than `max_word_pieces` pieces."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    pieces = [Run(text)] if format == "text" else parts(text, format, ignore_tags, non_splitting_tags,
                                                         splitting_tags)
    prepared = PreparedText(pieces, escaper(format))
    for part in pieces:
        if isinstance(part, Run):
            prepared.units += part.cut(language, split_sentences, fits, max_word_pieces)
    return prepared


@dataclass
class PreparedTexts:
    """Several texts translated together: their units in one list, rendered back per text."""

    texts: list[PreparedText]

    @property
    def units(self) -> list[str]:
        return [unit for text in self.texts for unit in text.units]

    def marked_units(self) -> list[int]:
        """Indices (in `units`) of the units with inline marks inside: the ones whose alignment matters."""
        out, first = [], 0
        for text in self.texts:
            out += [first + i for i in text.marked_units()]
            first += len(text.units)
        return out

    def per_text(self, values: Sequence[T]) -> list[list[T]]:
        """One value per unit (in `units` order) → the values of each text's units."""
        values = iter(values)
        return [[next(values) for _ in text.units] for text in self.texts]

    def render(self, translations: Sequence[str], alignments: dict[int, Alignment]) -> list[str]:
        """Each text rebuilt from its units' translations; `alignments` by unit index (marked units only)."""
        aligned = self.per_text([alignments.get(i) for i in range(len(translations))])
        return [text.render(texts, marks)
                for text, texts, marks in zip(self.texts, self.per_text(translations), aligned)]


def translate_texts(texts: Sequence[str], language: str | None, translate: Callable[[list[str]], list[str]],
                    fits: Callable[[str], bool] | None = None,
                    align: Callable[[list[int]], list[Alignment]] | None = None, **options) -> list[str]:
    """Texts translated through their units in one call of `translate` (units in, translations out, in order).
    `align`, called after `translate` with the indices of the units that hold inline marks (in that list of
    units), returns their word alignments; without it marks are placed proportionally. `options` as for
    prepare()."""
    prepared = PreparedTexts([prepare(text, language, fits=fits, **options) for text in texts])
    translations = translate(prepared.units)
    marked = prepared.marked_units()
    alignments = dict(zip(marked, align(marked))) if align is not None and marked else {}
    return prepared.render(translations, alignments)
