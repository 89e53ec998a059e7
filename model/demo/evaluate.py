"""Exact-match accuracy of the demo model per language on held-out numbers (never seen in training), per dtype,
and the share of its outputs identical to the first dtype's (the quality a cheaper number format costs).

    python -m model.demo.evaluate [--model DIR] [--numbers 1000] [--beam-sizes 1,4]
                                  [--dtype float32,bfloat16,int8] [--device cuda --dtype float16]
"""

from __future__ import annotations

import argparse
import time

from ..kernels.dtypes import CHOICES
from ..translator import Translator
from .data import LANGUAGES, held_out_numbers, target_text


def translate(translator: Translator, numbers: list[int], lang: str, beam_size: int) -> list[str]:
    from num2words import num2words

    sources = [num2words(n, lang="en") for n in numbers]
    return [o.text for o in translator.translate(sources, target_lang=lang, beam_size=beam_size, batch_size=64)]


def dtype_list(raw: str) -> list[str]:
    dtypes = raw.split(",")
    for dtype in dtypes:
        if dtype not in CHOICES:
            raise argparse.ArgumentTypeError(f"{dtype!r} is not one of {', '.join(CHOICES)}")
    return dtypes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m model.demo.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint directory (default: the embedded demo model)")
    p.add_argument("--numbers", type=int, default=1000)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", type=dtype_list, default=["float32"],
                   help="comma-separated; the first is the reference of the 'identical' column")
    p.add_argument("--beam-sizes", default="1,4")
    p.add_argument("--show-errors", type=int, default=3)
    args = p.parse_args(argv)
    numbers = held_out_numbers(args.numbers)
    reference_name, reference = args.dtype[0], {}  # (beam size, language) → the first dtype's outputs
    print(f"{len(numbers)} held-out numbers per language on {args.device}: exact match (%) per language, "
          f"outputs identical to {reference_name}'s (%)\n")
    print("| dtype | decoding | " + " | ".join(LANGUAGES) + f" | identical to {reference_name} | seconds |")
    print("|---|---|" + "---|" * (len(LANGUAGES) + 2))
    for dtype in args.dtype:
        translator = Translator.from_pretrained(args.model, device=args.device, dtype=dtype)
        for beam_size in map(int, args.beam_sizes.split(",")):
            start, cells, errors, same = time.monotonic(), [], [], 0
            for lang in LANGUAGES:
                texts = translate(translator, numbers, lang, beam_size)
                expected = [target_text(n, lang) for n in numbers]
                wrong = [f"  {lang} {n}: {t!r} != {e!r}" for n, t, e in zip(numbers, texts, expected) if t != e]
                cells.append(f"{100.0 * (len(numbers) - len(wrong)) / len(numbers):.1f}")
                errors += wrong[: args.show_errors]
                same += sum(a == b for a, b in zip(texts, reference.setdefault((beam_size, lang), texts)))
            name = "greedy" if beam_size == 1 else f"beam {beam_size}"
            identical = 100.0 * same / (len(numbers) * len(LANGUAGES))
            print(f"| {translator.bundle.dtype} | {name} | " + " | ".join(cells) +
                  f" | {identical:.1f} | {time.monotonic() - start:.0f} |", flush=True)
            if errors:
                print("\n".join(errors))


if __name__ == "__main__":
    main()
