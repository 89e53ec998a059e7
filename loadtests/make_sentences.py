"""Writes the demo model's default source sentences: English number words with a mix of lengths.

    python -m loadtests.make_sentences > loadtests/sentences_demo.txt

Numbers are drawn by magnitude (1 to 6 digits, longer ones more often), so the file covers 0..999,999 and
mixes short sources ("seven") with long ones ("nine hundred and eighty-seven thousand, ...").
"""

from __future__ import annotations

import argparse
import random

from num2words import num2words

# (lowest, highest, share of the lines): one band per number of digits.
MAGNITUDES = ((0, 9, 0.05), (10, 99, 0.10), (100, 999, 0.15), (1_000, 9_999, 0.20), (10_000, 99_999, 0.20),
              (100_000, 999_999, 0.30))


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [share for _, _, share in MAGNITUDES]
    bands = rng.choices(MAGNITUDES, weights=weights, k=count)
    return [num2words(rng.randint(low, high), lang="en") for low, high, _ in bands]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print("\n".join(sentences(args.count, args.seed)))


if __name__ == "__main__":
    main()
