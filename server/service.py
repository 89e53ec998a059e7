"""One served model: validates and tokenizes requests, submits them to its engine loop, assembles results."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import AsyncIterator

from model import DecodeParams, Hypothesis
from model.translator import Translator

from .detokenize import IncrementalDetokenizer
from .engine import Engine
from .errors import InvalidRequest, RequestTimeout
from .loop import EngineLoop
from .request import ErrorOutput, FinalOutput, TokenOutput
from .scheduler import Scheduler
from .schemas import (Alternative, GenerateRequest, GenerateResponse, ModelCard, ModelLimits, TranslateRequest,
                      TranslateResponse, Translation, Usage)
from .settings import Settings


def model_limits(settings: Settings) -> ModelLimits:
    return ModelLimits(max_texts=settings.max_texts, max_input_tokens=settings.max_input_tokens,
                       max_new_tokens=settings.max_new_tokens, max_beams=settings.beam_limit)


@dataclass
class StreamEvent:
    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


class ModelService:
    def __init__(self, name: str, translator: Translator, settings: Settings):
        self.name, self.translator = name, translator
        positions = translator.model.config.max_position_embeddings
        # The server's limits, clamped to what the model's positions allow.
        self.settings = replace(settings, max_input_tokens=min(settings.max_input_tokens, positions),
                                max_new_tokens=min(settings.max_new_tokens, positions - 1))
        settings = self.settings
        engine = Engine(translator, settings.max_batch_rows, settings.max_input_tokens, settings.max_new_tokens)
        scheduler = Scheduler(settings.max_batch_rows, settings.max_batch_tokens, settings.max_queued_requests)
        self.loop = EngineLoop(engine, scheduler).start()

    def close(self) -> None:
        self.loop.stop()

    def card(self) -> ModelCard:
        return ModelCard(id=self.name, languages=self.translator.target_languages,
                         default_beam_size=self.translator.generation.num_beams, limits=model_limits(self.settings))

    # ---- validation: every limit is checked before anything is queued -----------------------------------
    def _encode(self, texts: list[str], target_lang: str | None, fields: list[str]) -> list[list[int]]:
        """Token ids per text; `fields` names each text in error messages (text, text[3])."""
        languages = self.translator.target_languages
        if target_lang is not None and target_lang not in languages:
            raise InvalidRequest(f"target_lang {target_lang!r} is not supported by model {self.name!r}; "
                                 f"supported: {', '.join(languages) or 'none (the model has no language codes)'}",
                                 field="target_lang", limit=languages)
        sources = [self.translator.tokenizer.encode(self.translator.source_text(t, target_lang)) for t in texts]
        for ids, name in zip(sources, fields):
            if len(ids) > self.settings.max_input_tokens:
                raise InvalidRequest(f"{name} has {len(ids)} tokens; at most {self.settings.max_input_tokens}",
                                     field=name, limit=self.settings.max_input_tokens)
        return sources

    def _params(self, max_new_tokens: int | None, num_beams: int | None, n_best: int = 1, **kw) -> DecodeParams:
        s = self.settings
        if max_new_tokens is not None and max_new_tokens > s.max_new_tokens:
            raise InvalidRequest(f"max_new_tokens {max_new_tokens} is above the limit {s.max_new_tokens}",
                                 field="max_new_tokens", limit=s.max_new_tokens)
        beams_limit = s.beam_limit
        if num_beams is not None and num_beams > beams_limit:
            raise InvalidRequest(f"beams {num_beams} is above the limit {beams_limit}", field="beam_size",
                                 limit=beams_limit)
        # Model defaults (generation_config.json) above the server's limits are clamped to them.
        sampling = kw.get("do_sample", self.translator.generation.do_sample)
        if sampling and num_beams not in (None, 1):
            raise InvalidRequest("sampling (requested, or the model's default) needs 1 beam", field="beam_size",
                                 limit=1)
        beams = min(num_beams or (1 if sampling else self.translator.generation.num_beams), beams_limit)
        if n_best > beams:
            raise InvalidRequest(f"n_best {n_best} exceeds the number of beams {beams}", field="n_best", limit=beams)
        params = self.translator.decode_params(beam_size=beams, max_new_tokens=max_new_tokens, n_best=n_best, **kw)
        return replace(params, max_new_tokens=min(params.max_new_tokens, s.max_new_tokens))

    # ---- requests ----------------------------------------------------------------------------------------
    async def translate(self, req: TranslateRequest) -> TranslateResponse:
        texts = req.text
        if len(texts) > self.settings.max_texts:
            raise InvalidRequest(f"text has {len(texts)} items; at most {self.settings.max_texts}", field="text",
                                 limit=self.settings.max_texts)
        params = self._params(req.max_new_tokens, req.beam_size, length_penalty=req.length_penalty,
                              n_best=req.n_best)
        non_empty = [i for i, t in enumerate(texts) if t.strip()]
        names = [req.field_name(i) for i in non_empty]
        sources = self._encode([texts[i] for i in non_empty], req.target_lang, names)
        finals = await self._run_all(sources, params)
        translations = [Translation(text="") for _ in texts]
        for i, hyps in zip(non_empty, finals):
            translations[i] = self._translation(hyps, req.return_scores)
        usage = Usage(input_tokens=sum(map(len, sources)), output_tokens=sum(len(h[0].token_ids) for h in finals))
        return TranslateResponse(model=self.name, translations=translations, usage=usage)

    def _translation(self, hyps: list[Hypothesis], with_scores: bool) -> Translation:
        best = self.translator.translation(hyps)
        alternatives = [Alternative(text=a.text, score=a.score if with_scores else None) for a in best.alternatives]
        return Translation(text=best.text, score=best.score if with_scores else None,
                           alternatives=alternatives or None)

    async def _run_all(self, sources: list[list[int]], params: DecodeParams) -> list[list[Hypothesis]]:
        if not sources:
            return []
        submitted = self.loop.submit(sources, params)

        async def final(request, queue):
            async for output in self.loop.outputs(request, queue):
                if isinstance(output, ErrorOutput):
                    raise output.error
                if isinstance(output, FinalOutput):
                    return output.hypotheses

        tasks = [asyncio.ensure_future(final(r, q)) for r, q in submitted]
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                return await asyncio.gather(*tasks)
        except TimeoutError:
            raise RequestTimeout(f"the request took longer than {self.settings.request_timeout_s} s",
                                 limit=self.settings.request_timeout_s) from None
        finally:
            for task in tasks:
                task.cancel()  # their `finally` cancels unfinished sequences and frees their rows

    def _generate_params(self, req: GenerateRequest) -> DecodeParams:
        # Any sampling knob asks for sampling; the ones not given come from the model's generation config.
        knobs = {k: v for k, v in (("temperature", req.temperature), ("top_k", req.top_k), ("top_p", req.top_p),
                                   ("seed", req.seed)) if v is not None}
        if knobs and req.num_beams not in (None, 1):
            raise InvalidRequest("sampling (temperature, top_k, top_p, seed) needs num_beams 1", field="num_beams",
                                 limit=1)
        return self._params(req.max_new_tokens, req.num_beams, **(dict(knobs, do_sample=True) if knobs else {}))

    async def generate_events(self, req: GenerateRequest) -> AsyncIterator[StreamEvent]:
        """Text pieces as they are decoded, then one event with finish_reason and usage."""
        params = self._generate_params(req)
        sources = self._encode([req.text], None, ["text"])
        (request, queue), = self.loop.submit(sources, params)
        detok = IncrementalDetokenizer(self.translator.tokenizer.decode)
        stops = [s for s in req.stop or [] if s]
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        outputs = self.loop.outputs(request, queue)
        try:
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    output = await asyncio.wait_for(anext(outputs), max(remaining, 0.001))
                except asyncio.TimeoutError:
                    raise RequestTimeout(f"the request took longer than {self.settings.request_timeout_s} s",
                                         limit=self.settings.request_timeout_s) from None
                if isinstance(output, ErrorOutput):
                    raise output.error
                if isinstance(output, TokenOutput):
                    piece = detok.add(output.token)
                    reason = "length"
                else:
                    best = output.hypotheses[0]
                    detok.tokens = list(best.token_ids)  # beam search streams no tokens: all text comes now
                    piece, reason = detok.flush(), best.finish_reason
                stopped, piece = self._cut_at_stop(detok.sent, piece, stops)
                if piece:
                    yield StreamEvent(text=piece)
                if stopped or isinstance(output, FinalOutput):
                    usage = Usage(input_tokens=len(sources[0]), output_tokens=len(detok.tokens))
                    yield StreamEvent(finish_reason="stop" if stopped else reason, usage=usage)
                    return
        finally:
            await outputs.aclose()

    @staticmethod
    def _cut_at_stop(text_so_far: str, piece: str, stops: list[str]) -> tuple[bool, str]:
        """If a stop string appears in the text, keep the piece only up to it."""
        before = text_so_far[: len(text_so_far) - len(piece)]
        hits = [text_so_far.find(s, max(0, len(before) - len(s) + 1)) for s in stops]
        hits = [h for h in hits if h != -1]
        if not hits:
            return False, piece
        return True, text_so_far[len(before): min(hits)]

    async def generate(self, req: GenerateRequest) -> GenerateResponse:
        text, last = "", None
        async for event in self.generate_events(req):
            text += event.text
            last = event
        return GenerateResponse(model=self.name, text=text, finish_reason=last.finish_reason, usage=last.usage)
