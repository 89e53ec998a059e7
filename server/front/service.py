"""One served model: validates and tokenizes domain jobs, submits them to its engine loop, assembles results."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import AsyncIterator

from model import (AlignmentInput, DecodeParams, Document, Hypothesis, MarkupError, ModelBundle, Source,
                   UnsupportedLanguage, iso_code, marked_units, prepare, word_alignments)

from .detokenize import IncrementalDetokenizer
from .domain import (Candidate, DecodeOptions, GenerationJob, GenerationResult, StreamEvent, TextOptions,
                     TranslatedText, TranslationJob, TranslationResult)
from .engine import Engine
from .errors import BadBody, InvalidRequest, QueueFull, RequestTimeout
from .loop import EngineHandle, EngineLoop
from .metrics import EngineStats
from .registry import model_limits
from .request import ErrorOutput, FinalOutput, TokenOutput
from .scheduler import Scheduler
from .settings import Settings


def start_engine_loop(bundle: ModelBundle, settings: Settings, stats: EngineStats) -> EngineLoop:
    """The model's engine loop in this process; `settings` limited to the model (registry.model_limits)."""
    engine = Engine(bundle.network, settings.max_batch_rows, settings.max_input_tokens, settings.max_new_tokens,
                    static_shapes=settings.cuda_graphs and bundle.network.device.type == "cuda")
    scheduler = Scheduler(settings.max_batch_rows, settings.max_batch_tokens, settings.max_queued_requests,
                          settings.max_request_share)
    return EngineLoop(engine, scheduler, stats, partial(word_alignments, bundle)).start()


class ModelService:
    """`loop`: the model's engine when it runs elsewhere (an EngineProcess; `bundle` then needs no weights);
    None: an engine loop in this process over `bundle.network`."""

    def __init__(self, name: str, bundle: ModelBundle, settings: Settings, loop: EngineHandle | None = None):
        self.name, self.bundle = name, bundle
        self.settings = model_limits(settings, bundle.max_positions)
        self.loop = loop or start_engine_loop(bundle, self.settings, EngineStats(name))

    def close(self) -> None:
        self.loop.stop()

    # ---- validation: every limit is checked before anything is queued -----------------------------------
    def _languages(self, source_lang: str | None, target_lang: str | None,
                   translating: bool = True) -> tuple[str | None, str | None]:
        try:
            return self.bundle.resolve_languages(source_lang, target_lang, translating)
        except UnsupportedLanguage as e:
            raise InvalidRequest(f"{e} (model {self.name!r})", field=e.field, limit=list(e.supported)) from None

    def _sources(self, texts: tuple[str, ...], fields: tuple[str, ...], source_lang: str | None,
                 target_lang: str | None, encoded: dict[str, Source] | None = None) -> list[Source]:
        """Encoder ids per text (from `encoded` when tokenized already); `fields` names each text in error
        messages (text, text[3])."""
        encoded = encoded or {}
        sources = [encoded.get(t) or self.bundle.source(t, source_lang, target_lang) for t in texts]
        for source, name in zip(sources, fields):
            if len(source.ids) > self.settings.max_input_tokens:
                raise InvalidRequest(f"{name} has {len(source.ids)} tokens; at most {self.settings.max_input_tokens}",
                                     field=name, limit=self.settings.max_input_tokens)
        return sources

    def _params(self, options: DecodeOptions, beams_field: str) -> DecodeParams:
        s, generation = self.settings, self.bundle.generation
        if options.max_new_tokens is not None and options.max_new_tokens > s.max_new_tokens:
            raise InvalidRequest(f"max_new_tokens {options.max_new_tokens} is above the limit {s.max_new_tokens}",
                                 field="max_new_tokens", limit=s.max_new_tokens)
        num_beams, beams_limit = options.num_beams, s.beam_limit
        if num_beams is not None and num_beams > beams_limit:
            raise InvalidRequest(f"{beams_field} {num_beams} is above the limit {beams_limit}", field=beams_field,
                                 limit=beams_limit)
        knobs = options.sampling_knobs
        overrides = dict(knobs, do_sample=True) if knobs else {}
        sampling = overrides.get("do_sample", generation.do_sample)
        if sampling and num_beams not in (None, 1):
            raise InvalidRequest("sampling (temperature, top_k, top_p, seed, or the model's default) needs 1 beam",
                                 field=beams_field, limit=1)
        # Model defaults (generation_config.json) above the server's limits are clamped to them.
        beams = min(num_beams or (1 if sampling else generation.num_beams), beams_limit)
        if options.n_best > beams:
            raise InvalidRequest(f"n_best {options.n_best} exceeds the number of beams {beams}", field="n_best",
                                 limit=beams)
        for rule in ("length_penalty", "repetition_penalty", "no_repeat_ngram_size", "min_new_tokens"):
            if getattr(options, rule) is not None:
                overrides[rule] = getattr(options, rule)
        params = self.bundle.decode_params(beam_size=beams, max_new_tokens=options.max_new_tokens,
                                           n_best=options.n_best, **overrides)
        return replace(params, max_new_tokens=min(params.max_new_tokens, s.max_new_tokens))

    # ---- translation -------------------------------------------------------------------------------------
    async def translate(self, job: TranslationJob) -> TranslationResult:
        """Each text is cut into sentences (or its markup's text runs), every sentence is one sequence in the
        running batch, and each text is rebuilt from its sentences' translations."""
        if len(job.texts) > self.settings.max_texts:
            raise InvalidRequest(f"{job.texts_field} has {len(job.texts)} items; at most {self.settings.max_texts}",
                                 field=job.texts_field, limit=self.settings.max_texts)
        source_lang, target_lang = self._languages(job.source_lang, job.target_lang)
        params = self._params(job.options, job.beams_field)
        encoded: dict[str, Source] = {}  # sentences tokenized while cutting the texts, not tokenized again
        documents = [self._document(text, name, job.text_options, source_lang, target_lang, encoded)
                     for text, name in zip(job.texts, job.fields)]
        owners = [i for i, document in enumerate(documents) for _ in document.units]
        sources = self._sources(tuple(u for d in documents for u in d.units), tuple(job.fields[i] for i in owners),
                                source_lang, target_lang, encoded)
        finals = await self._run_all(sources, params)
        alignments = await self._alignments(documents, sources, finals)
        best, aligned = iter(finals), iter(alignments)
        texts = [self._translated(document, [next(best) for _ in document.units],
                                  [next(aligned) for _ in document.units]) for document in documents]
        return TranslationResult(model=self.name, texts=tuple(texts), source_lang=source_lang, target_lang=target_lang,
                                 input_tokens=sum(len(s.ids) for s in sources),
                                 output_tokens=sum(len(h[0].token_ids) for h in finals))

    def _document(self, text: str, field: str, options: TextOptions, source_lang: str | None,
                  target_lang: str | None, encoded: dict[str, Source]) -> Document:
        limit = self.settings.max_document_chars
        if len(text) > limit:
            raise InvalidRequest(f"{field} has {len(text)} characters; at most {limit}", field=field, limit=limit)

        def fits(sentence: str) -> bool:
            if sentence not in encoded:
                encoded[sentence] = self.bundle.source(sentence, source_lang, target_lang)
            return len(encoded[sentence].ids) <= self.settings.max_input_tokens

        language = iso_code(source_lang) if source_lang else None
        try:
            return prepare(text, language, options.format, options.split_sentences, options.ignore_tags,
                           options.non_splitting_tags, options.splitting_tags, fits)
        except MarkupError as e:
            raise BadBody(f"{field}: {e}", field=field) from None
        except ValueError as e:  # an unknown format or split mode
            raise InvalidRequest(str(e), field=field) from None

    async def _alignments(self, documents: list[Document], sources: list[Source],
                          finals: list[list[Hypothesis]]) -> list:
        """Word alignments (cross-attention) of the units with inline marks, None for the others: a torch pass,
        beside the engine's decoding."""
        alignments = [None] * len(sources)
        marked = marked_units(documents)
        if marked:
            units = [unit for document in documents for unit in document.units]
            inputs = [AlignmentInput(units[i], sources[i].ids, finals[i][0].token_ids) for i in marked]
            for i, alignment in zip(marked, await self.loop.align(inputs)):
                alignments[i] = alignment
        return alignments

    def _translated(self, document: Document, hyps: list[list[Hypothesis]], alignments: list) -> TranslatedText:
        """The text rebuilt from its units' best translations, inline marks placed by their alignments; its score
        is their mean. Alternatives exist only for a text of one unit (n-best lists of several sentences do not
        combine)."""
        text = document.render([self.bundle.decode(h[0].token_ids) for h in hyps], alignments)
        if not hyps:
            return TranslatedText(text=text, score=None)
        alternatives = () if len(hyps) > 1 else tuple(Candidate(self.bundle.decode(h.token_ids), h.score)
                                                      for h in hyps[0][1:])
        return TranslatedText(text=text, score=sum(h[0].score for h in hyps) / len(hyps), alternatives=alternatives)

    async def _run_all(self, sources: list[Source], params: DecodeParams) -> list[list[Hypothesis]]:
        """Decode every source; a long document enters the engine a window at a time (twice the batch rows, so
        rows never wait for the event loop), all its sequences in one scheduler group, their final outputs in
        one queue."""
        results: list[list[Hypothesis] | None] = [None] * len(sources)
        window = 2 * self.settings.max_batch_rows
        finals: asyncio.Queue = asyncio.Queue()  # (request, its final output), from every window
        unfinished, group, next_source = {}, None, 0  # unfinished: request → its source's index
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                while next_source < len(sources) or unfinished:
                    batch = sources[next_source:next_source + window - len(unfinished)]
                    try:
                        added = self.loop.submit([(s.ids, replace(params, forced_bos_token_id=s.forced_bos))
                                                  for s in batch], group, stream=False, into=finals) if batch else []
                    except QueueFull:
                        if not unfinished:
                            raise
                        added = []  # others' requests fill the queue: retry when one of ours finishes
                    for request, _ in added:
                        unfinished[request] = next_source
                        group, next_source = request.group, next_source + 1
                    request, output = await finals.get()  # final outputs only (stream=False)
                    if isinstance(output, ErrorOutput):
                        raise output.error
                    results[unfinished.pop(request)] = output.hypotheses
            return results
        except TimeoutError:
            raise RequestTimeout(f"the request took longer than {self.settings.request_timeout_s} s",
                                 limit=self.settings.request_timeout_s) from None
        finally:
            self.loop.cancel(*unfinished)  # all at once: none of them admitted while the others leave

    # ---- generation --------------------------------------------------------------------------------------
    async def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        """Text pieces as they are decoded, then one event with finish_reason and token counts."""
        params = self._params(job.options, job.beams_field)
        source_lang, target_lang = self._languages(job.source_lang, job.target_lang, translating=False)
        source, = self._sources((job.text,), ("text",), source_lang, target_lang)
        (request, queue), = self.loop.submit([(source.ids, replace(params, forced_bos_token_id=source.forced_bos))])
        detok = IncrementalDetokenizer(self.bundle.decode)
        stops = [s for s in job.stop if s]
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
                    yield StreamEvent(finish_reason="stop" if stopped else reason, input_tokens=len(source.ids),
                                      output_tokens=len(detok.tokens))
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

    async def generate(self, job: GenerationJob) -> GenerationResult:
        text, last = "", None
        async for event in self.generate_events(job):
            text += event.text
            last = event
        return GenerationResult(model=self.name, text=text, finish_reason=last.finish_reason,
                                input_tokens=last.input_tokens, output_tokens=last.output_tokens)
