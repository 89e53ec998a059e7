"""Command-line translator: one source line in, one translation line out, in input order.

    python -m model [--model DIR] [--source-lang XX] [--target-lang XX] [--beam-size N]
                    [--input FILE] [--output FILE]
    python -m model --input in.docx --output out.docx      # .html, .srt, .docx: the whole document

A .txt file or stdin goes line by line; an .html, .srt or .docx input (the kind from its extension) is translated
as a document: sentences, markup and run formatting kept (see model/text), written to --output.

Every supported family (Marian, M2M100, NLLB-200, mBART-50); language codes may be the model's own
(fra_Latn, fr_XX, >>fra<<) or ISO 639-1 / 639-3 (fr, fra).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from .alignment import AlignmentInput, word_alignments
from .errors import CheckpointError
from .kernels.dtypes import CHOICES, kernels_for
from .text import read_file, translate_texts
from .text.languages import iso_code
from .translator import Translator

DOCUMENT_SUFFIXES = (".html", ".htm", ".srt", ".docx")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m model", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint directory or Hub repo id ORG/NAME[@REVISION] (default: the embedded "
                                    "demo model)")
    p.add_argument("--source-lang", help="source language code (default: the model's default source)")
    p.add_argument("--target-lang", help="target language code (a multilingual model's >>xx<< code, or the "
                                         "target language token forced first)")
    p.add_argument("--beam-size", type=int, help="beams (default: the model's generation config)")
    p.add_argument("--length-penalty", type=float)
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default 32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="auto", choices=CHOICES,
                   help="auto (default): bfloat16 on a CPU that multiplies it in hardware, float32 on other CPUs, "
                        "float16 on a GPU; int8: dynamic quantization, CPU only")
    p.add_argument("--normalize-punctuation", action="store_true",
                   help="apply Moses punctuation normalization before tokenizing (transformers does not)")
    p.add_argument("--input", help="source file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("beam_size", "max_new_tokens", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1, got {value}", file=sys.stderr)
            return 2
    try:
        translator = Translator.from_pretrained(args.model, device=args.device, dtype=args.dtype,
                                                normalize_punctuation=args.normalize_punctuation)
        device = translator.bundle.network.device.type
        if args.dtype == "auto":
            print(f"dtype: {translator.bundle.dtype} (auto on {device})", file=sys.stderr)
        if device == "cpu":
            print(f"kernels: {kernels_for(translator.bundle.dtype)}", file=sys.stderr)
        suffix = Path(args.input or "").suffix.lower()
        if suffix in DOCUMENT_SUFFIXES:
            return translate_document(translator, args, suffix)
        if args.input:
            with open(args.input, encoding="utf-8") as f:
                lines = f.read().splitlines()
        else:
            lines = sys.stdin.read().splitlines()
        bar = tqdm(total=len(lines), file=sys.stderr, unit="line", disable=not args.input)
        translations = translator.translate(
            lines, source_lang=args.source_lang, target_lang=args.target_lang, beam_size=args.beam_size,
            max_new_tokens=args.max_new_tokens,
            length_penalty=args.length_penalty, batch_size=args.batch_size, progress=bar.update)
        bar.close()
    except (CheckpointError, ValueError, OSError) as e:  # FileError, MarkupError are ValueErrors
        print(f"error: {e}", file=sys.stderr)
        return 1
    text = "".join(t.text + "\n" for t in translations)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def translate_document(translator: Translator, args: argparse.Namespace, suffix: str) -> int:
    """--input FILE (.html, .srt, .docx) → --output FILE of the same kind."""
    if not args.output:
        print("error: a document input needs --output", file=sys.stderr)
        return 2
    parsed = read_file(Path(args.input).read_bytes(), suffix)
    bundle = translator.bundle
    source_lang, target_lang = bundle.resolve_languages(args.source_lang, args.target_lang)
    units, translations = [], []

    def translate(texts: list[str]) -> list[str]:
        units[:] = texts
        translations[:] = translator.translate(texts, source_lang=source_lang, target_lang=target_lang,
                                               beam_size=args.beam_size, max_new_tokens=args.max_new_tokens,
                                               length_penalty=args.length_penalty, batch_size=args.batch_size)
        return [t.text for t in translations]

    def align(marked: list[int]):  # the units with inline marks (HTML tags, .docx runs) → word alignments
        return word_alignments(bundle, [AlignmentInput(units[i], bundle.source(units[i], source_lang, target_lang).ids,
                                                       translations[i].token_ids) for i in marked])

    limit = bundle.max_positions
    texts = translate_texts(parsed.texts, iso_code(source_lang) if source_lang else None, translate,
                            fits=lambda s: len(bundle.source(s, source_lang, target_lang).ids) <= limit, align=align,
                            format=parsed.format, non_splitting_tags=parsed.non_splitting_tags,
                            split_sentences="1" if parsed.format == "text" else "nonewlines")
    Path(args.output).write_bytes(parsed.write(texts))
    return 0
