"""Glossaries in the model's terms: which target terms a source sentence calls for, their target token ids, and
the source words each translates.

    glossary = Glossary([("forty-two", "quarante-trois")])
    glossary.targets("One hundred and Forty-Two.")     # → ("quarante-trois",)
    term_ids(bundle.tokenizer, "quarante-trois")        # → (55, 7, 85): one of DecodeParams.constraints
    with_glossary(bundle.tokenizer, glossary, source, text, vocab_size)  # → the Source, its constraints, their places

Matching is on words: a text is split into words and punctuation marks (NFKC, case-folded), so case and spacing
do not matter, a term matches only whole words, and punctuation next to it does not hide it. The longest terms
(in words) are matched first, and a match may not overlap an earlier one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import replace
from typing import Iterable

from .decoding.source import Source
from .loading.families import Tokenizer
from .text.inline import token_words, word_spans

WORD = re.compile(r"\w+|[^\w\s]")  # a word, or one punctuation mark


class UnspellableTerm(ValueError):
    """A target term the model's target vocabulary cannot spell (unknown pieces); the message names it."""

    def __init__(self, term: str, spelled: str):
        super().__init__(f"glossary target term {term!r} cannot be spelled by the model's target vocabulary "
                         f"(it reads back as {spelled!r})")
        self.term = term


def words(text: str) -> tuple[str, ...]:
    return tuple(WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _located_words(text: str) -> list[tuple[str, tuple[int, int]]]:
    """words(text), each with its (start, end) in `text`."""
    return [(unicodedata.normalize("NFKC", m.group()).casefold(), m.span()) for m in WORD.finditer(text)]


class Glossary:
    """(source term, target term) pairs, indexed by the source term's words (a later pair wins a repeated term)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self.terms = {key: target for source, target in pairs if (key := words(source))}
        self.longest = max(map(len, self.terms), default=0)

    def targets(self, sentence: str) -> tuple[str, ...]:
        """The target terms of the source terms in `sentence`, in the order they occur, each once."""
        return tuple(self.matches(sentence))

    def matches(self, sentence: str) -> dict[str, list[tuple[int, int]]]:
        """The target terms of the source terms in `sentence`, in the order they first occur, each with the
        (start, end) characters of its source term's occurrences."""
        located = _located_words(sentence)
        tokens = tuple(word for word, _ in located)
        found = [(n, start) for n in range(min(self.longest, len(tokens)), 0, -1)
                 for start in range(len(tokens) - n + 1) if tokens[start:start + n] in self.terms]
        taken, matches = set(), []
        for n, start in found:  # longest first, then leftmost
            span = range(start, start + n)
            if taken.isdisjoint(span):
                taken.update(span)
                matches.append((start, n))
        out: dict[str, list[tuple[int, int]]] = {}
        for start, n in sorted(matches):
            out.setdefault(self.terms[tokens[start:start + n]], []).append(
                (located[start][1][0], located[start + n - 1][1][1]))
        return out


def term_ids(tokenizer: Tokenizer, term: str) -> tuple[int, ...]:
    """A target term's ids as the model spells it inside running text. UnspellableTerm when they do not read back
    as the term (unknown pieces, characters the vocabulary lacks)."""
    ids = tuple(tokenizer.encode_target(term.strip()))
    spelled = tokenizer.decode(list(ids))
    if not ids or _spacing(spelled) != _spacing(term):
        raise UnspellableTerm(term, spelled)
    return ids


def check_terms(tokenizer: Tokenizer, terms: Iterable[str]) -> None:
    """UnspellableTerm for the first target term the model cannot spell (a glossary checked when it is made)."""
    for term in terms:
        term_ids(tokenizer, term)


@functools.lru_cache(maxsize=8)
def glued_tokens(tokenizer: Tokenizer, vocab_size: int) -> bytes:
    """A bit per target token (DecodeParams.glued), set where it continues the word before it: no leading space,
    and a letter, digit, hyphen or apostrophe first (`-neuf`, `echs`, `ünf`); computed once per vocabulary."""
    bits = bytearray((vocab_size + 7) // 8)
    for token, spelled in enumerate(tokenizer.token_bytes(list(range(vocab_size)))):
        text = spelled.decode("utf-8", "replace")
        if text and (text[0].isalnum() or text[0] in "-'’"):
            bits[token >> 3] |= 1 << (token & 7)
    return bytes(bits)


def with_glossary(tokenizer: Tokenizer, glossary: Glossary, source: Source, sentence: str, vocab_size: int) -> Source:
    """`source` (the encoded `sentence`) with the target-id sequences its translation must contain under `glossary`,
    one per occurrence of a source term (a term twice is written twice), and where each may begin
    (DecodeParams.source_words, constraint_words): the words of `sentence` its source tokens spell, as
    model.alignment counts them, and those of each occurrence's source term; and the target tokens (of
    `vocab_size`) that glue onto the word before them, which a term may not be followed by."""
    matches = glossary.matches(sentence)
    if not matches:
        return source
    spans = word_spans(sentence)
    occurrences = sorted((place, target) for target, places in matches.items() for place in places)
    constraint_words = tuple(tuple(w for w, (start, end) in enumerate(spans) if start < to and at < end)
                             for (at, to), _ in occurrences)
    return replace(source, constraints=tuple(term_ids(tokenizer, target) for _, target in occurrences),
                   source_words=_source_words(tokenizer, source, sentence, len(spans)),
                   constraint_words=constraint_words, glued=glued_tokens(tokenizer, vocab_size))


def _source_words(tokenizer: Tokenizer, source: Source, sentence: str, count: int) -> tuple[int, ...]:
    """Per source token, the first word of `sentence` it spells; the tokens after the last word (</s>) are word
    `count`, the end of the source, which no term holds: a decoder that attends there most has read the whole
    source, so no term begins (after `twelve` → `douze` the attention is all on </s>; were it no word, the one word
    of the source would win and `treize` would count as placed after `douze`). Tokens before the text (a language
    tag) belong to no word (-1): the first step attends to the tag and the first word alike."""
    spelled = [words[0] if words else -1
               for words in token_words(sentence, tokenizer.token_bytes(source.ids, source=True))]
    last = max((i for i, w in enumerate(spelled) if w >= 0), default=len(spelled))
    return tuple(w if i <= last or w >= 0 else count for i, w in enumerate(spelled))


def _spacing(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())
