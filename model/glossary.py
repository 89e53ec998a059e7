"""Glossaries in the model's terms: which target terms a source sentence calls for, and their target token ids.

    glossary = Glossary([("forty-two", "quarante-trois")])
    glossary.targets("One hundred and Forty-Two.")     # → ("quarante-trois",)
    term_ids(bundle.tokenizer, "quarante-trois")        # → (55, 7, 85): one of DecodeParams.constraints

Matching is on words: a text is split into words and punctuation marks (NFKC, case-folded), so case and spacing
do not matter, a term matches only whole words, and punctuation next to it does not hide it. The longest terms
(in words) are matched first, and a match may not overlap an earlier one.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

from .families import Tokenizer

WORD = re.compile(r"\w+|[^\w\s]")  # a word, or one punctuation mark


class UnspellableTerm(ValueError):
    """A target term the model's target vocabulary cannot spell (unknown pieces); the message names it."""

    def __init__(self, term: str, spelled: str):
        super().__init__(f"glossary target term {term!r} cannot be spelled by the model's target vocabulary "
                         f"(it reads back as {spelled!r})")
        self.term = term


def words(text: str) -> tuple[str, ...]:
    return tuple(WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


class Glossary:
    """(source term, target term) pairs, indexed by the source term's words (a later pair wins a repeated term)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self.terms = {key: target for source, target in pairs if (key := words(source))}
        self.longest = max(map(len, self.terms), default=0)

    def targets(self, sentence: str) -> tuple[str, ...]:
        """The target terms of the source terms in `sentence`, in the order they occur, each once."""
        tokens = words(sentence)
        found = [(n, start) for n in range(min(self.longest, len(tokens)), 0, -1)
                 for start in range(len(tokens) - n + 1) if tokens[start:start + n] in self.terms]
        taken, matches = set(), []
        for n, start in found:  # longest first, then leftmost
            span = range(start, start + n)
            if taken.isdisjoint(span):
                taken.update(span)
                matches.append((start, self.terms[tokens[start:start + n]]))
        return tuple(dict.fromkeys(target for _, target in sorted(matches)))


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


def term_constraints(tokenizer: Tokenizer, glossary: Glossary, sentence: str) -> tuple[tuple[int, ...], ...]:
    """The target-id sequences a translation of `sentence` must contain under `glossary`."""
    return tuple(term_ids(tokenizer, target) for target in glossary.targets(sentence))


def _spacing(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())
