"""Glossaries on the demo model: how often the target term appears, what else changes, and what it costs.

    python -m loadtests.bench_glossary [--numbers 1000] [--beam-sizes 1,4] [--speed-numbers 256] [--rounds 3]
                                       [--corpus "held out"|tune|none]

Corpus: per language, term and exact on loadtests.glossary_corpus' one-word, two-word and repeated-term texts.

Numbers: held-out numbers per language whose source term occurs once (model.demo.data, never trained on), each translated with a glossary that
forces a different valid target phrase. French and Spanish write the last two digits as separate words, so the
glossary maps them to the next number's (`forty-two` → `quarante-trois`: `one hundred and forty-two` should give
`cent quarante-trois`); German and Italian write a number as one word, so there the glossary maps the whole number
to the next number's word. Columns: term (the target term in the output: the WMT terminology task's exact match),
exact (the output is the changed number's words), in place (what precedes the term's last occurrence is what
precedes the replaced phrase in the unconstrained output: the term stands where that phrase began, whatever the
model writes after it), rest unchanged (the output with its last forced term put back to the unconstrained phrase
equals the unconstrained output), chrF against the unconstrained output (character
6-grams, β = 2, corpus statistics, as sacrebleu's default), and, for a glossary of each number's own phrase, the
share of outputs identical to the unconstrained ones among those whose unconstrained output has that phrase.

Speed (French, the same numbers, batch 32, the median of --rounds alternating runs): unconstrained translations
alone and beside one constrained neighbour (whose outputs must stay identical), and every translation constrained
against none, per beam size.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections import Counter

import torch
from num2words import num2words

from model import Glossary, Translator
from model.demo.data import LANGUAGES, held_out_numbers, target_text

from .glossary_corpus import Case, corpus, exact

WHOLE_WORD_LANGUAGES = ("de", "it")  # numbers written as one word: the glossary forces the whole number


def changed(n: int) -> int:
    """The number whose last two digits replace n's: the next one (99 → 98, to stay in the same hundred)."""
    last = n % 100
    return n - last + (last + 1 if last < 99 else last - 1)


def glossary_case(n: int, lang: str, forced: int) -> tuple[str, str, str]:
    """(source term, target term, the phrase the unconstrained translation should hold instead) for a glossary
    forcing number `forced`'s words where n's are."""
    if lang in WHOLE_WORD_LANGUAGES:
        return num2words(n, lang="en"), target_text(forced, lang), target_text(n, lang)
    return num2words(n % 100, lang="en"), target_text(forced % 100, lang), target_text(n % 100, lang)


def chrf(hypotheses: list[str], references: list[str], order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF (0-100): character n-gram precision and recall, spaces removed, averaged over n = 1..order."""
    matches, hyp_total, ref_total = Counter(), Counter(), Counter()
    for hyp, ref in zip(hypotheses, references):
        hyp, ref = hyp.replace(" ", ""), ref.replace(" ", "")
        for n in range(1, order + 1):
            h = Counter(hyp[i:i + n] for i in range(len(hyp) - n + 1))
            r = Counter(ref[i:i + n] for i in range(len(ref) - n + 1))
            matches[n] += sum((h & r).values())
            hyp_total[n], ref_total[n] = hyp_total[n] + sum(h.values()), ref_total[n] + sum(r.values())
    precision = statistics.mean(matches[n] / hyp_total[n] if hyp_total[n] else 0.0 for n in range(1, order + 1))
    recall = statistics.mean(matches[n] / ref_total[n] if ref_total[n] else 0.0 for n in range(1, order + 1))
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + beta ** 2) * precision * recall / (beta ** 2 * precision + recall)


def in_place(text: str, term: str, unconstrained: str, original: str) -> bool:
    """The last occurrence of `term` in `text` comes after what precedes the last `original` in `unconstrained`."""
    at, was = text.rfind(term), unconstrained.rfind(original)
    return at >= 0 and was >= 0 and text[:at] == unconstrained[:was]


def put_back(text: str, term: str, original: str) -> str:
    """text with its last occurrence of `term` replaced by `original`."""
    at = text.rfind(term)
    return text if at < 0 else text[:at] + original + text[at + len(term):]


def occurrences(n: int, lang: str) -> int:
    """How often n's source term (glossary_case) occurs in n's words."""
    source, target, _ = glossary_case(n, lang, n)
    return sum(map(len, Glossary([(source, target)]).matches(num2words(n, lang="en")).values()))


def quality(translator: Translator, all_numbers: list[int], beam_sizes: list[int]) -> None:
    print(f"\n{len(all_numbers)} held-out numbers per language, those with the source term once, glossaries forcing "
          "the next number's words (%, chrF 0-100)\n")
    print("| language | decoding | numbers | term | exact | in place | rest unchanged | chrF vs unconstrained | "
          "own-term glossary: identical where written anyway |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lang in LANGUAGES:
        # a source term once (`six` in `fifty-six thousand, eight hundred and six` is replaced twice: the repeated
        # terms of the corpus tables)
        numbers = [n for n in all_numbers if occurrences(n, lang) == 1]
        sources = [num2words(n, lang="en") for n in numbers]
        cases = [glossary_case(n, lang, changed(n)) for n in numbers]
        forcing = [Glossary([(source, target)]) for source, target, _ in cases]
        own = [Glossary([glossary_case(n, lang, n)[:2]]) for n in numbers]
        for beams in beam_sizes:
            plain = [t.text for t in translator.translate(sources, target_lang=lang, beam_size=beams)]
            forced = [t.text for t in translator.translate(sources, target_lang=lang, beam_size=beams,
                                                           glossary=forcing)]
            kept = [t.text for t in translator.translate(sources, target_lang=lang, beam_size=beams, glossary=own)]
            count = len(numbers)
            term = sum(target in text for text, (_, target, _) in zip(forced, cases)) / count
            exact = sum(text == target_text(changed(n), lang) for text, n in zip(forced, numbers)) / count
            placed = sum(in_place(text, target, p, original)
                         for text, (_, target, original), p in zip(forced, cases, plain)) / count
            rest = sum(put_back(text, target, original) == p
                       for text, (_, target, original), p in zip(forced, cases, plain)) / count
            # the own-term glossary changes nothing where the model writes the term anyway
            anyway = [(a, b) for a, b, n in zip(kept, plain, numbers) if glossary_case(n, lang, n)[1] in b]
            identical = sum(a == b for a, b in anyway) / len(anyway)
            name = "greedy" if beams == 1 else f"beam {beams}"
            print(f"| {lang} | {name} | {count} | {100 * term:.1f} | {100 * exact:.1f} | {100 * placed:.1f} | {100 * rest:.1f} | "
                  f"{chrf(forced, plain):.1f} | {100 * identical:.1f} |", flush=True)


def corpus_scores(translator: Translator, lang: str, cases: list[Case], beams: int,
                  n_best: int = 1) -> tuple[float, float, int]:
    """(term, exact, cases measured) over `cases` (loadtests.glossary_corpus): term, every returned hypothesis
    (n_best of them) holds the target term as often as the source holds the source term; exact, the best one
    is the unconstrained translation with each phrase swapped (over the cases where that is defined)."""
    sources = [c.text for c in cases]
    plain = translator.translate(sources, target_lang=lang, beam_size=beams)
    forced = translator.translate(sources, target_lang=lang, beam_size=beams, n_best=n_best,
                                  glossary=[Glossary([(c.source_term, c.target_term)]) for c in cases])
    term = sum(all(text.count(c.target_term) >= c.occurrences for text in [t.text, *(a.text for a in t.alternatives)])
               for c, t in zip(cases, forced)) / len(cases)
    verdicts = [v for c, p, t in zip(cases, plain, forced) if (v := exact(c, p.text, t.text)) is not None]
    return term, sum(verdicts) / max(len(verdicts), 1), len(verdicts)


def corpus_tables(translator: Translator, beam_sizes: list[int], part: str) -> None:
    print(f"\nCorpus ({part}): term and exact (%), cases measured\n")
    for lang in LANGUAGES:
        print(f"\n{lang}\n\n| texts | decoding | cases | term | exact |\n|---|---|---|---|---|")
        for kind, cases in corpus(lang, part).items():
            for beams in beam_sizes if cases else []:
                term, right, count = corpus_scores(translator, lang, cases, beams)
                name = "greedy" if beams == 1 else f"beam {beams}"
                print(f"| {kind} | {name} | {count} | {100 * term:.1f} | {100 * right:.1f} |", flush=True)


def timed(run) -> tuple[float, list[str]]:
    start = time.perf_counter()
    texts = [t.text for t in run()]
    return time.perf_counter() - start, texts


def speed(translator: Translator, numbers: list[int], beam_sizes: list[int], rounds: int) -> None:
    lang = "fr"
    sources = [num2words(n, lang="en") for n in numbers]
    forcing = [Glossary([glossary_case(n, lang, changed(n))[:2]]) for n in numbers]
    neighbour = [forcing[0]] + [Glossary(())] * (len(numbers) - 1)  # one constrained sentence among them
    print(f"\n{len(numbers)} French numbers, batch 32, median of {rounds} rounds (seconds)\n")
    print("| decoding | unconstrained | with one constrained neighbour | others identical | all constrained | "
          "constrained / unconstrained |")
    print("|---|---|---|---|---|---|")
    for beams in beam_sizes:
        def run(glossary):
            return lambda: translator.translate(sources, target_lang=lang, beam_size=beams, glossary=glossary)
        runs = {"plain": run(None), "neighbour": run(neighbour), "all": run(forcing)}
        for warm_up in runs.values():
            warm_up()
        times, texts = {name: [] for name in runs}, {}
        for _ in range(rounds):
            for name, go in runs.items():
                seconds, texts[name] = timed(go)
                times[name].append(seconds)
        median = {name: statistics.median(values) for name, values in times.items()}
        same = texts["neighbour"][1:] == texts["plain"][1:]
        name = "greedy" if beams == 1 else f"beam {beams}"
        print(f"| {name} | {median['plain']:.2f} | {median['neighbour']:.2f} | {'yes' if same else 'NO'} | "
              f"{median['all']:.2f} | {median['all'] / median['plain']:.2f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_glossary", description=__doc__.splitlines()[0])
    p.add_argument("--numbers", type=int, default=1000, help="held-out numbers per language (quality)")
    p.add_argument("--beam-sizes", default="1,4")
    p.add_argument("--speed-numbers", type=int, default=256, help="0: no speed table")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--corpus", choices=("held out", "tune", "none"), default="held out",
                   help="the one-word, two-word and repeated-term tables (loadtests.glossary_corpus)")
    args = p.parse_args(argv)
    beam_sizes = [int(b) for b in args.beam_sizes.split(",")]
    translator = Translator.from_pretrained()
    print(f"demo model, float32, {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")
    # numbers ending in 00 have no last-two-digit words to force: the next held-out ones take their place
    count = max(args.numbers, args.speed_numbers)
    numbers = [n for n in held_out_numbers(count + count // 10 + 10) if n % 100][:count]
    if args.corpus != "none":
        corpus_tables(translator, beam_sizes, args.corpus)
    if args.numbers:
        quality(translator, numbers[:args.numbers], beam_sizes)
    if args.speed_numbers:
        speed(translator, numbers[:args.speed_numbers], beam_sizes, args.rounds)


if __name__ == "__main__":
    main()
