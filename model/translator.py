"""Python API: Translator.from_pretrained(path).translate(texts, ...), on top of a ModelBundle."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .decoding.batch_decoder import BatchDecoder
from .decoding.search import Hypothesis
from .glossary import Glossary, with_glossary
from .loading.bundle import ModelBundle, load


@dataclass
class Translation:
    text: str
    score: float
    token_ids: list[int]
    finish_reason: str
    alternatives: list["Translation"]


class Translator:
    def __init__(self, bundle: ModelBundle):
        self.bundle = bundle

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str = "cpu", dtype: str = "float32",
                        normalize_punctuation: bool = False) -> "Translator":
        """A checkpoint directory or Hub repo id (ORG/NAME[@REVISION]) of any supported family; no path loads the
        embedded demo model."""
        return cls(load(path, device=device, dtype=dtype, normalize_punctuation=normalize_punctuation))

    def translate(self, texts: list[str], source_lang: str | None = None, target_lang: str | None = None,
                  beam_size: int | None = None, max_new_tokens: int | None = None,
                  length_penalty: float | None = None, n_best: int = 1, batch_size: int = 32,
                  progress: Callable[[int], None] | None = None, glossary: Glossary | list[Glossary] | None = None,
                  **overrides) -> list[Translation]:
        """Translate in input order; sources are decoded longest first with continuous batching. Language codes
        may be the model's own or ISO 639-1/639-3 (UnsupportedLanguage when the model has no such language).
        `glossary` (one for every text, or one per text): the target terms of the source terms a text contains
        appear in its translation (UnspellableTerm for a target term the model cannot spell)."""
        bundle = self.bundle
        source_lang, target_lang = bundle.resolve_languages(source_lang, target_lang, texts=texts)
        prepared = {i: bundle.text_source(t, source_lang, target_lang) for i, t in enumerate(texts) if t.strip()}
        params = bundle.decode_params(num_beams=beam_size, max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                                      num_return_sequences=n_best, **overrides)
        results: dict[int, Translation] = {i: Translation("", 0.0, [], "eos", []) for i in range(len(texts))
                                           if i not in prepared}
        if progress and results:
            progress(len(results))  # blank lines are done already
        order = sorted(prepared, key=lambda i: -len(prepared[i].ids))
        longest = max((len(s.ids) for s in prepared.values()), default=1)
        glossaries = glossary if isinstance(glossary, list) else [glossary or Glossary(())] * len(texts)
        sources = {i: with_glossary(bundle.tokenizer, glossaries[i], prepared[i],
                                  bundle.text_target(texts[i], target_lang)[0], bundle.config.target_vocab_size)
                   for i in order}
        jobs = {i: (sources[i].ids, sources[i].decode_params(params)) for i in order}
        widest = max((job_params.rows for _, job_params in jobs.values()), default=1)
        decoder = BatchDecoder(bundle.network, capacity=batch_size * widest, max_source_len=longest,
                               max_new_tokens=params.max_new_tokens)
        for ids, job_params in jobs.values():
            decoder.check(ids, job_params)
        pending = iter(order)
        next_key = next(pending, None)
        while next_key is not None or decoder.searches:
            admitted, free = [], decoder.free_rows
            while next_key is not None and free >= jobs[next_key][1].rows:
                admitted.append((next_key, *jobs[next_key]))
                free -= jobs[next_key][1].rows
                next_key = next(pending, None)
            if admitted:
                decoder.admit(admitted)
            for event in decoder.step():
                if event.results is not None:
                    results[event.key] = self.translation(event.results)
                    if progress:
                        progress(1)
        return [results[i] for i in range(len(texts))]

    def translation(self, hypotheses: list[Hypothesis]) -> Translation:
        """The best hypothesis as text, the others as its alternatives."""
        out = [Translation(self.bundle.decode(h.token_ids), h.score, h.token_ids, h.finish_reason, [])
               for h in hypotheses]
        out[0].alternatives = out[1:]
        return out[0]
