"""The speech demo on held-out speech: numbers no training clip said, in training voices and in voices it never
heard (model.demo.spoken.HELD_OUT_VARIANTS); word error rate and exact transcripts, then the transcripts through
the text demo into each of its languages (exact against num2words).

    python -m model.demo.evaluate_speech [--count 200] [--dtype float32,bfloat16,int8]
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from ..speech import SpeechOptions, Transcriber
from ..translator import Translator
from .data import LANGUAGES, held_out_numbers, target_text
from .spoken import HELD_OUT_VARIANTS, random_voice, say_all, spoken_text

SPEECH_CHECKPOINT = Path(__file__).parent / "speech_checkpoint"


def words(text: str) -> list[str]:
    """Lowercase words, punctuation around them dropped ('forty-two' is one word)."""
    return [w for w in re.sub(r"[^\w\s-]", " ", text.lower()).split() if w.strip("-")]


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Word substitutions, insertions and deletions (Levenshtein)."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref != hyp))
    return row[-1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m model.demo.evaluate_speech", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(SPEECH_CHECKPOINT))
    p.add_argument("--count", type=int, default=200, help="held-out numbers per voice set")
    p.add_argument("--dtype", default="float32", help="comma-separated number formats")
    args = p.parse_args(argv)
    numbers = held_out_numbers()[:args.count]
    rng = random.Random(7)
    sets = {"training voices": [(n, random_voice(rng)) for n in numbers],
            "held-out voices": [(n, random_voice(rng, HELD_OUT_VARIANTS)) for n in numbers]}
    spoken = {name: say_all(requests) for name, requests in sets.items()}
    print("| format | voices | clips | WER % | exact transcripts % | " + " | ".join(
        f"→ {lang} exact %" for lang in LANGUAGES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(LANGUAGES))
    for dtype in args.dtype.split(","):
        transcriber = Transcriber.from_pretrained(args.checkpoint, dtype=dtype)
        translator = Translator.from_pretrained(dtype=dtype)
        for name, clips in spoken.items():
            transcripts = [t.text.strip() for t in transcriber.transcribe_all([s for _, _, s in clips],
                                                                             SpeechOptions(timestamps=False))]
            references = [spoken_text(n) for n, _, _ in clips]
            errors = sum(edit_distance(words(r), words(h)) for r, h in zip(references, transcripts))
            wer = 100 * errors / sum(len(words(r)) for r in references)
            exact = 100 * sum(words(r) == words(h) for r, h in zip(references, transcripts)) / len(clips)
            translated = []
            for lang in LANGUAGES:
                out = translator.translate(transcripts, target_lang=lang, batch_size=64)
                translated.append(100 * sum(o.text == target_text(n, lang) for o, (n, _, _) in zip(out, clips))
                                  / len(clips))
            print(f"| {dtype} | {name} | {len(clips)} | {wer:.1f} | {exact:.1f} | "
                  + " | ".join(f"{x:.1f}" for x in translated) + " |", flush=True)


if __name__ == "__main__":
    main()
