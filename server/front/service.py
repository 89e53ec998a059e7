"""One model this process holds: validates and tokenizes domain jobs, submits them to its engine, assembles results."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import AsyncIterator

from model import (AlignmentInput, DecodeParams, Glossary, Hypothesis, MarkupError, ModelBundle, PreparedText,
                   PreparedTexts, Segment, Source, SpeechWindows, Transcript, UnspellableTerm, UnsupportedLanguage,
                   WordTooLong, iso_code, prepare, with_glossary)

from ..domain import (DecodeOptions, GenerationJob, GenerationResult, ScoredText, SpeechJob, StreamEvent, TextOptions,
                      TranslatedText, TranslationJob, TranslationResult)
from ..engine.loop import EngineHandle
from ..engine.sequence import ErrorOutput, FinalOutput, TokenOutput
from ..errors import (InvalidMarkup, InvalidRequest, RequestTimeout, SamplingNeedsOneBeam, TooManyRows,
                      TooManySentences, TooManyTokens)
from ..settings import Settings
from .detokenize import IncrementalDetokenizer, cut_at_stop
from .decoding import decode_all


class HeldModel:
    """A model this process holds, with its engine (a ServedModel; runtime.forwarding.RemoteModel is one another
    replica holds). `limits`: the server's settings limited to the model (registry.model_limits). `engine`: the
    model's engine, in this process or in one of its own (`bundle` then needs no weights)."""

    def __init__(self, name: str, bundle: ModelBundle, limits: Settings, engine: EngineHandle):
        self.name, self.bundle, self.settings, self.engine = name, bundle, limits, engine

    def close(self) -> None:
        self.engine.stop()

    # ---- validation: every limit is checked before anything is queued -----------------------------------
    def _targets(self, source_lang: str | None, target_lang: str | None, texts: tuple[str, ...],
                 translating: bool = True) -> tuple[str | None, list[tuple[str, str | None]]]:
        """The model's source code, and each text without the target it may name at its start with its target;
        a language the model lacks, or a text naming another target than target_lang, is a 422."""
        try:
            source_lang, target_lang = self.bundle.resolve_languages(source_lang, target_lang, translating, texts)
            return source_lang, [self.bundle.text_target(text, target_lang) for text in texts]
        except UnsupportedLanguage as e:
            raise InvalidRequest(f"{e} (model {self.name!r})", field=e.field, limit=list(e.supported)) from None

    def _sources(self, texts: list[str], fields: list[str], source_lang: str | None, targets: list[str | None],
                 encoded: dict[tuple[str | None, str], Source] | None = None) -> list[Source]:
        """Encoder ids per text and its target (from `encoded` when tokenized already); `fields` names each text in
        error messages (text, text[3])."""
        encoded = encoded or {}
        sources = [encoded.get((target, t)) or self.bundle.source(t, source_lang, target)
                   for t, target in zip(texts, targets)]
        for source, name in zip(sources, fields):
            if len(source.ids) > self.settings.max_input_tokens:
                raise InvalidRequest(f"{name} has {len(source.ids)} tokens; at most {self.settings.max_input_tokens}",
                                     field=name, limit=self.settings.max_input_tokens)
        return sources

    def _params(self, options: DecodeOptions) -> DecodeParams:
        """The request's choices over the model's defaults (ModelBundle.decode_params), within the model's limits:
        a choice above a limit is refused, a model default above one is lowered to it. (The beams a request may ask
        for are checked by front.dispatch, which every job passes.)"""
        s, choices = self.settings, options.choices()
        for knob in ("max_new_tokens", "min_new_tokens"):
            asked = getattr(options, knob)
            if asked is not None and asked > s.max_new_tokens:
                raise TooManyTokens(knob, asked, s.max_new_tokens)
        if options.num_beams not in (None, 1) and self.bundle.samples(choices):
            raise SamplingNeedsOneBeam()
        params = self.bundle.decode_params(**{**choices, "num_return_sequences": 1})
        beams = min(params.num_beams, s.beam_limit)
        if options.n_best > beams:
            raise InvalidRequest(f"n_best {options.n_best} exceeds the number of beams {beams}", field="n_best",
                                 limit=beams)
        return replace(params, num_beams=beams, num_return_sequences=options.n_best,
                       max_new_tokens=min(params.max_new_tokens, s.max_new_tokens))

    # ---- translation -------------------------------------------------------------------------------------
    async def translate(self, job: TranslationJob) -> TranslationResult:
        """Each text is cut into sentences (or its markup's text runs), every sentence is one sequence in the
        running batch, and each text is rebuilt from its sentences' translations. (The number of texts and the
        characters are checked by front.dispatch, which every job passes.)"""
        source_lang, targeted = self._targets(job.source_lang, job.target_lang, job.texts)
        params = self._params(job.options)
        if job.glossary and params.do_sample:
            raise InvalidRequest("a glossary needs greedy or beam search, not sampling", field="glossary")
        encoded: dict = {}  # (target, sentence) → Source: tokenized while cutting the texts, not tokenized again
        prepared = PreparedTexts([self._prepared(text, name, job.text_options, source_lang, target, encoded)
                                  for (text, target), name in zip(targeted, job.fields)])
        limit = self.settings.max_request_units
        if len(prepared.units) > limit:
            raise TooManySentences(len(prepared.units), limit)
        fields = [name for name, text in zip(job.fields, prepared.texts) for _ in text.units]
        targets = [target for (_, target), text in zip(targeted, prepared.texts) for _ in text.units]
        sources = self._constrained(self._sources(prepared.units, fields, source_lang, targets, encoded),
                                    prepared.units, job.glossary)
        self._check_rows(sources, params)
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                finals = await decode_all(self.engine, sources, params, window=2 * self.settings.max_batch_rows)
        except TimeoutError:
            raise self.timed_out() from None
        alignments = await self._alignments(prepared, sources, finals)
        rendered = prepared.render([self.bundle.decode(h[0].token_ids) for h in finals], alignments)
        texts = [self._translated(text, hyps) for text, hyps in zip(rendered, prepared.per_text(finals))]
        named = {target for _, target in targeted}
        target_lang = named.pop() if len(named) == 1 else None  # texts that name their own targets may differ
        return TranslationResult(model=self.name, texts=tuple(texts), source_lang=source_lang, target_lang=target_lang,
                                 input_tokens=sum(len(s.ids) for s in sources),
                                 output_tokens=sum(len(h[0].token_ids) for h in finals))

    def _constrained(self, sources: list[Source], units: list[str], pairs: tuple[tuple[str, str], ...]) -> list[Source]:
        """Each sentence's source with the target terms its translation must contain: those of the glossary's source
        terms it contains. A target term the model cannot spell is a 400 naming it."""
        if not pairs:
            return sources
        glossary = Glossary(pairs)
        try:
            vocab_size = self.bundle.config.target_vocab_size
            return [with_glossary(self.bundle.tokenizer, glossary, source, unit, vocab_size)
                    for source, unit in zip(sources, units)]
        except UnspellableTerm as e:
            raise InvalidRequest(f"{e} (model {self.name!r})", field="glossary") from None

    def _check_rows(self, sources: list[Source], params: DecodeParams) -> None:
        """Each sentence's decoding rows (DecodeParams.rows: its beams, and the rows its glossary terms add) within the
        batch's max_batch_rows: the scheduler would never admit one above it, so it is refused before any is queued.
        (The beams alone are within the batch already: Settings.beam_limit.)"""
        rows = max((source.decode_params(params).rows for source in sources if source.constraints), default=0)
        if rows > self.settings.max_batch_rows:
            raise TooManyRows(params.num_beams, rows, self.settings.max_batch_rows)

    def _prepared(self, text: str, field: str, options: TextOptions, source_lang: str | None,
                  target_lang: str | None, encoded: dict[tuple[str | None, str], Source]) -> PreparedText:
        def fits(sentence: str) -> bool:
            key = (target_lang, sentence)
            if key not in encoded:
                encoded[key] = self.bundle.source(sentence, source_lang, target_lang)
            return len(encoded[key].ids) <= self.settings.max_input_tokens

        language = iso_code(source_lang) if source_lang else None
        try:
            return prepare(text, language, options.format, options.split_sentences, options.ignore_tags,
                           options.non_splitting_tags, options.splitting_tags, fits, self.settings.max_word_pieces)
        except WordTooLong as e:
            raise InvalidRequest(f"{field}: {e}", field=field, limit=e.limit) from None
        except MarkupError as e:
            raise InvalidMarkup(field, str(e)) from None
        except ValueError as e:  # an unknown format or split mode
            raise InvalidRequest(str(e), field=field) from None

    async def _alignments(self, prepared: PreparedTexts, sources: list[Source],
                          finals: list[list[Hypothesis]]) -> dict:
        """Word alignments (cross-attention) of the units with inline marks, by unit index: a torch pass, beside
        the engine's decoding."""
        marked = prepared.marked_units()
        if not marked:
            return {}
        units = prepared.units
        inputs = [AlignmentInput(units[i], sources[i].ids, finals[i][0].token_ids) for i in marked]
        return dict(zip(marked, await self.engine.align(inputs)))

    def _translated(self, text: str, hyps: list[list[Hypothesis]]) -> TranslatedText:
        """A rebuilt text with its score, the mean of its units' best; alternatives exist only for a text of one
        unit (n-best lists of several sentences do not combine)."""
        if not hyps:
            return TranslatedText(text=text, score=None)
        alternatives = () if len(hyps) > 1 else tuple(ScoredText(self.bundle.decode(h.token_ids), h.score)
                                                      for h in hyps[0][1:])
        return TranslatedText(text=text, score=sum(h[0].score for h in hyps) / len(hyps), alternatives=alternatives)

    # ---- generation --------------------------------------------------------------------------------------
    async def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        """Text pieces as they are decoded, then one event with finish_reason and token counts."""
        params = self._params(job.options)
        source_lang, [(text, target)] = self._targets(job.source_lang, job.target_lang, (job.text,), translating=False)
        source, = self._sources([text], [job.field], source_lang, [target])
        (sequence, queue), = self.engine.submit([(source.ids, source.decode_params(params))])
        detok = IncrementalDetokenizer(self.bundle.decode)
        stops = [s for s in job.stop if s]
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        outputs = self.engine.outputs(sequence, queue)
        try:
            while True:
                # A timeout around each await, not across the yields (the consumer's own awaits are not ours to
                # time). Not asyncio.wait_for: on Python 3.11 it drops a cancellation that meets a ready output,
                # and a client's hang-up would then decode to the end.
                try:
                    async with asyncio.timeout_at(deadline):
                        output = await anext(outputs)
                except TimeoutError:
                    raise self.timed_out() from None
                if isinstance(output, ErrorOutput):
                    raise output.error
                if isinstance(output, TokenOutput):
                    piece = detok.add(output.token)
                    reason = "length"
                else:
                    best = output.hypotheses[0]
                    detok.tokens = list(best.token_ids)  # beam search streams no tokens: all text comes now
                    piece, reason = detok.flush(), best.finish_reason
                stopped, piece = cut_at_stop(detok.sent, piece, stops)
                if piece:
                    yield StreamEvent(text=piece)
                if stopped or isinstance(output, FinalOutput):
                    yield StreamEvent(finish_reason="stop" if stopped else reason, input_tokens=len(source.ids),
                                      output_tokens=len(detok.tokens))
                    return
        finally:
            await outputs.aclose()

    def timed_out(self) -> RequestTimeout:
        limit = self.settings.request_timeout_s
        return RequestTimeout(f"the request took longer than {limit} s", limit=limit)

    # ---- speech ------------------------------------------------------------------------------------------
    async def transcribe_events(self, job: SpeechJob) -> AsyncIterator[Segment | Transcript]:
        """Each segment as its 30-s window is decoded, then the Transcript (front.speech is speech's door). The
        windows go one after the other, each one sequence of the running batch, within the request's deadline
        (timed around each await, not across the yields, as generate_events)."""
        try:
            windows = SpeechWindows(self.bundle, job.samples, job.options)
        except UnsupportedLanguage as e:
            raise InvalidRequest(f"{e} (model {self.name!r})", field="language", limit=list(e.supported)) from None
        except ValueError as e:  # a task the model lacks (an English-only model translating), ...
            raise InvalidRequest(f"{e} (model {self.name!r})", field="task") from None
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    source = await asyncio.to_thread(windows.next_source)  # log-mel features: torch, off the loop
                    if source is None:
                        break
                    params = self._window_params(windows.decode_params())
                    [hypotheses] = await decode_all(self.engine, [source], params, window=1)
            except TimeoutError:
                raise self.timed_out() from None
            for segment in windows.take(hypotheses[0]):
                yield segment
        yield windows.transcript()

    def _window_params(self, params: DecodeParams) -> DecodeParams:
        """A window's params within the decoder's max_new_tokens positions (prompt and window together), as every
        sequence's: the window's tokens are cut to fit (Whisper's own decoding stops a window at 224), a prompt
        that leaves no room is a 422."""
        room = self.settings.max_new_tokens - params.prompt_steps
        if room < 1:
            raise InvalidRequest(f"prompt: the decoder prompt takes {params.prompt_steps} of the "
                                 f"{self.settings.max_new_tokens} positions a window has (max_new_tokens)",
                                 field="prompt", limit=self.settings.max_new_tokens)
        return replace(params, max_new_tokens=min(params.max_new_tokens, room))

    async def generate(self, job: GenerationJob) -> GenerationResult:
        text, last = "", None
        async for event in self.generate_events(job):
            text += event.text
            last = event
        return GenerationResult(model=self.name, text=text, finish_reason=last.finish_reason,
                                input_tokens=last.input_tokens, output_tokens=last.output_tokens)
