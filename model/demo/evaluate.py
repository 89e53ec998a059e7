"""Exact-match accuracy of the demo model per language on held-out numbers (never seen in training).

    python -m model.demo.evaluate [--model DIR] [--numbers 1000] [--beam-sizes 1,4] [--device cuda --dtype float16]
"""

from __future__ import annotations

import argparse
import time

from ..dtypes import CHOICES
from ..translator import Translator
from .data import LANGUAGES, held_out_numbers, target_text


def accuracy(translator: Translator, numbers: list[int], lang: str, beam_size: int) -> tuple[float, list[str]]:
    from num2words import num2words

    sources = [num2words(n, lang="en") for n in numbers]
    outputs = translator.translate(sources, target_lang=lang, beam_size=beam_size, batch_size=64)
    expected = [target_text(n, lang) for n in numbers]
    errors = [f"{n}: {o.text!r} != {e!r}" for n, o, e in zip(numbers, outputs, expected) if o.text != e]
    return 100.0 * (len(numbers) - len(errors)) / len(numbers), errors


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m model.demo.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint directory (default: the embedded demo model)")
    p.add_argument("--numbers", type=int, default=1000)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="float32", choices=CHOICES)
    p.add_argument("--beam-sizes", default="1,4")
    p.add_argument("--show-errors", type=int, default=3)
    args = p.parse_args(argv)
    translator = Translator.from_pretrained(args.model, device=args.device, dtype=args.dtype)
    numbers = held_out_numbers(args.numbers)
    print(f"{len(numbers)} held-out numbers per language, exact match (%), {args.dtype} on {args.device}\n")
    print("| decoding | " + " | ".join(LANGUAGES) + " | seconds |")
    print("|---|" + "---|" * (len(LANGUAGES) + 1))
    for beam_size in map(int, args.beam_sizes.split(",")):
        start, cells, errors = time.monotonic(), [], []
        for lang in LANGUAGES:
            acc, errs = accuracy(translator, numbers, lang, beam_size)
            cells.append(f"{acc:.1f}")
            errors += [f"  {lang} {e}" for e in errs[: args.show_errors]]
        name = "greedy" if beam_size == 1 else f"beam {beam_size}"
        print(f"| {name} | " + " | ".join(cells) + f" | {time.monotonic() - start:.0f} |", flush=True)
        if errors:
            print("\n".join(errors))


if __name__ == "__main__":
    main()
