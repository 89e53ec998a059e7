"""Python API: Translator.from_pretrained(path).translate(texts, ...)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from .batch_decoder import BatchDecoder
from .checkpoint import load_model
from .config import CheckpointError, GenerationDefaults
from .quantize import quantize_int8
from .search import DecodeParams, Hypothesis
from .tokenizer import MarianTokenizer
from .transformer import Seq2SeqTransformer

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CHOICES = (*DTYPES, "int8")  # int8: dynamic quantization of the Linear layers, CPU only


def demo_model_dir() -> Path:
    """The embedded demo checkpoint shipped inside the package."""
    path = Path(__file__).parent / "demo" / "checkpoint"
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path}: the embedded demo model is missing; pass a model directory")
    return path


def target_languages(tokenizer: MarianTokenizer) -> list[str]:
    codes = [code[2:-2] for code in tokenizer.language_codes]
    if codes:
        return codes
    return [tokenizer.target_lang] if tokenizer.target_lang else []


@dataclass
class Translation:
    text: str
    score: float
    token_ids: list[int]
    finish_reason: str
    alternatives: list["Translation"]


class Translator:
    def __init__(self, model: Seq2SeqTransformer, tokenizer: MarianTokenizer, generation: GenerationDefaults,
                 name: str = "model"):
        self.model, self.tokenizer, self.generation, self.name = model, tokenizer, generation, name

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str = "cpu", dtype: str = "float32",
                        normalize_punctuation: bool = False) -> "Translator":
        model_dir = Path(path) if path is not None else demo_model_dir()
        if not model_dir.is_dir():
            raise CheckpointError(f"{model_dir}: not a model directory")
        if dtype not in CHOICES:
            raise ValueError(f"dtype must be one of {', '.join(CHOICES)}, got {dtype!r}")
        model, generation = load_model(model_dir, device=device, dtype=DTYPES.get(dtype, torch.float32))
        if dtype == "int8":
            model = quantize_int8(model)
        tokenizer = MarianTokenizer.from_pretrained(model_dir, normalize_punctuation=normalize_punctuation)
        return cls(model, tokenizer, generation, name=model_dir.name)

    @property
    def target_languages(self) -> list[str]:
        """Languages selectable by a >>xx<< code (multilingual models), else the one the model produces."""
        return target_languages(self.tokenizer)

    def source_text(self, text: str, target_lang: str | None) -> str:
        """The source line for `target_lang`: a >>xx<< code is prepended when the model has codes."""
        if target_lang is None:
            return text
        if target_lang not in self.target_languages:
            raise ValueError(f"target_lang {target_lang!r} is not one of: {', '.join(self.target_languages) or 'none'}")
        return f">>{target_lang}<< {text}" if self.tokenizer.language_codes else text

    def decode_params(self, beam_size: int | None = None, max_new_tokens: int | None = None,
                      length_penalty: float | None = None, n_best: int = 1, **overrides) -> DecodeParams:
        g = self.generation
        sampling = overrides.get("do_sample", g.do_sample)
        params = DecodeParams(
            max_new_tokens=max_new_tokens or g.max_new_tokens,
            min_new_tokens=g.min_new_tokens,
            num_beams=beam_size or (1 if sampling else g.num_beams),
            length_penalty=g.length_penalty if length_penalty is None else length_penalty,
            early_stopping=g.early_stopping,
            num_return_sequences=n_best,
            do_sample=sampling,
            temperature=g.temperature,
            top_k=g.top_k,
            top_p=g.top_p,
            bad_words_ids=g.bad_words_ids,
            forced_eos_token_id=g.forced_eos_token_id,
        )
        return replace(params, **overrides)  # the caller's choices over generation_config.json's

    def translate(self, texts: list[str], target_lang: str | None = None, beam_size: int | None = None,
                  max_new_tokens: int | None = None, length_penalty: float | None = None, n_best: int = 1,
                  batch_size: int = 32, progress: Callable[[int], None] | None = None,
                  **overrides) -> list[Translation]:
        """Translate in input order; sources are decoded longest first with continuous batching."""
        params = self.decode_params(beam_size, max_new_tokens, length_penalty, n_best, **overrides)
        sources = {i: self.tokenizer.encode(self.source_text(t, target_lang))
                   for i, t in enumerate(texts) if t.strip()}
        results: dict[int, Translation] = {i: Translation("", 0.0, [], "eos", []) for i in range(len(texts))
                                           if i not in sources}
        if progress and results:
            progress(len(results))  # blank lines are done already
        order = sorted(sources, key=lambda i: -len(sources[i]))
        longest = max((len(s) for s in sources.values()), default=1)
        decoder = BatchDecoder(self.model, capacity=batch_size * params.num_beams, max_source_len=longest,
                               max_target_len=params.max_new_tokens + 1)
        for key in order:
            decoder.check(sources[key], params)
        pending = iter(order)
        next_key = next(pending, None)
        while next_key is not None or decoder.searches:
            admitted = []
            while next_key is not None and decoder.free_rows - len(admitted) * params.num_beams >= params.num_beams:
                admitted.append((next_key, sources[next_key], params))
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
        out = [Translation(self.tokenizer.decode(h.token_ids), h.score, h.token_ids, h.finish_reason, [])
               for h in hypotheses]
        out[0].alternatives = out[1:]
        return out[0]
