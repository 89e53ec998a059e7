"""Glossary cases on the demo model, built from number words rather than picked from outputs: every one-word and
two-word English number text with a glossary mapping the whole text to another number's words, and texts whose
source term occurs two, three or four times.

    cases = corpus("fr")                        # {"one word": [Case, ...], "two words": [...], "repeated": [...]}
    exact(case, unconstrained, constrained)     # the output is the unconstrained one with each phrase swapped

A case's phrase is what the source term should produce (num2words of its number in the target language); a
repeated case is kept only where swapping every occurrence of that phrase for the term gives the changed number's
words (a valid sentence: `deux cent deux mille deux cents` → `trois cent trois mille trois cents`, but not in
German, where numbers are one word, nor Spanish `doscientos dos`, whose phrase `dos` occurs once). Held out: the
cases split by a fixed hash into development (`part="tune"`) and held-out (`part="held out"`) halves; what is
measured and asserted is the held-out half.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from num2words import num2words

from model import Glossary
from model.demo.data import target_text

KINDS = ("one word", "two words", "repeated")


@dataclass(frozen=True)
class Case:
    text: str  # the English source
    source_term: str
    target_term: str
    phrase: str  # what the source term translates to without a glossary
    occurrences: int  # of the source term in the text


def english(n: int) -> str:
    return num2words(n, lang="en")


def _other(n: int, limit: int) -> int:
    """Another number of the same kind: the next one, the previous one at the end of the range."""
    return n + 1 if n + 1 < limit else n - 1


def _occurrences(text: str, phrase: str) -> int:
    return len(re.findall(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text))


def swap(text: str, phrase: str, term: str) -> str:
    """`text` with every whole-word occurrence of `phrase` replaced by `term`."""
    return re.sub(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", lambda _: term, text)


def _whole(n: int, other: int, lang: str) -> Case:
    return Case(english(n), english(n), target_text(other, lang), target_text(n, lang), 1)


def _repeated(n: int, part: int, other: int, lang: str) -> Case | None:
    """Number n whose words hold `part`'s words several times, glossary part → other; None where the swap is not
    the changed number's words in `lang`."""
    source, target = english(part), target_text(part, lang)
    count = sum(map(len, Glossary([(source, target)]).matches(english(n)).values()))
    changed = int(str(n).replace(str(part), str(other)))
    if count < 2 or _occurrences(target_text(n, lang), target) != count or \
            swap(target_text(n, lang), target, target_text(other, lang)) != target_text(changed, lang):
        return None
    return Case(english(n), source, target_text(other, lang), target, count)


def _all_cases(lang: str) -> dict[str, list[Case]]:
    one = [_whole(n, _other(n, 100), lang) for n in range(100)]
    two_words = [n for n in [*range(100, 1000, 100), *range(1000, 100_000, 1000)] if english(n).count(" ") == 1]
    two = [_whole(n, two_words[(i + 1) % len(two_words)], lang) for i, n in enumerate(two_words)]
    # a number's last words twice (42,242: a hundreds digit for each), a digit three times (202,200) and four
    # times (202,202)
    pairs = [(a * 1000 + (a % 9 + 1) * 100 + a, a) for a in range(2, 100)]
    pairs += [(d * 101_000 + d * 100, d) for d in range(2, 10)] + [(d * 101_101, d) for d in range(2, 10)]
    repeated = [c for n, part in pairs if (c := _repeated(n, part, _other(part, 100), lang))]
    return {"one word": one, "two words": two, "repeated": repeated}


def corpus(lang: str, part: str = "held out") -> dict[str, list[Case]]:
    """The cases of `lang` in one half: "tune" or "held out" (by a hash of the text)."""
    wanted = part == "held out"
    return {kind: [c for c in cases if (zlib.crc32(c.text.encode()) % 2 == 1) == wanted]
            for kind, cases in _all_cases(lang).items()}


def exact(case: Case, unconstrained: str, constrained: str) -> bool | None:
    """The constrained output is the unconstrained one with each occurrence of the case's phrase swapped for the
    term; None where the unconstrained output does not hold the phrase as often as the source holds the term (the
    model's own mistake, not the glossary's)."""
    if _occurrences(unconstrained, case.phrase) != case.occurrences:
        return None
    return constrained == swap(unconstrained, case.phrase, case.target_term)
