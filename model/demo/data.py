"""Number-words data: `>>de<< one hundred and two` → `einhundertzwei` (num2words is the ground truth)."""

from __future__ import annotations

import random

from num2words import num2words

LANGUAGES = ("de", "fr", "es", "it")
MAX_NUMBER = 999_999
# Italian is the hard one (one word per number, vowel elision): it gets more of the training pairs.
LANGUAGE_WEIGHTS = {"de": 0.22, "fr": 0.22, "es": 0.2, "it": 0.36}
# Small numbers are the building blocks of large ones; sample each magnitude often enough to learn it.
MAGNITUDES = ((0, 99, 0.1), (100, 9_999, 0.3), (10_000, MAX_NUMBER, 0.6))


def source_text(n: int, lang: str) -> str:
    return f">>{lang}<< {num2words(n, lang='en')}"


def target_text(n: int, lang: str) -> str:
    return num2words(n, lang=lang)


def held_out_numbers(count: int = 1000, seed: int = 1234) -> list[int]:
    """Numbers never used for training: uniform over 0..999,999."""
    return random.Random(seed).sample(range(MAX_NUMBER + 1), count)


def training_pairs(count: int, exclude: set[int], seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    langs, lang_weights = zip(*LANGUAGE_WEIGHTS.items())
    pairs = []
    while len(pairs) < count:
        low, high, _ = rng.choices(MAGNITUDES, weights=[m[2] for m in MAGNITUDES])[0]
        n = rng.randint(low, high)
        if n in exclude:
            continue
        lang = rng.choices(langs, weights=lang_weights)[0]
        pairs.append((source_text(n, lang), target_text(n, lang)))
    return pairs
