"""The one front every API translates through: picks models, detects source languages per text, merges results.

    result = await dispatch.translate(provider, job, model=None)
    ranked = dispatch.detect(provider, "Guten Tag", target_lang="en")
    results = await generation.generate(provider, jobs, model=None)   # front/generation.py: generation's door

Every request's limits are checked here, once, before any work or charge: the number of texts, the request's
characters, each text's characters, the beams (front/service.py checks what depends on the model: its token limits,
the sentences a request is cut into). They raise the typed errors of server/errors.py; each API words them.

A job whose `source_lang` is None or "auto" has each text's language detected on its own (never one guess for a
whole list), among the source languages of the served models that translate into the target (or of the model
named). Texts are grouped by detected language, each group goes to the model its language pair resolves to, the
groups run concurrently, and the results come back in input order with `TranslatedText.detected` set. When the
candidate models accept a single source language there is nothing to detect: that language is reported with
confidence 1.0.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import replace
from typing import Awaitable, Callable, Sequence

from model import FileError, FileTooLarge, MarkupError, ParsedFile, detect_language, detectable, read_file, text_content

from ..domain import (DetectedLanguage, GenerationJob, ModelInfo, TextOptions, TranslatedText, TranslationJob,
                      TranslationResult)
from ..errors import (BadBody, BodyTooLarge, InvalidMarkup, NotFollowed, TextTooLong, TooManyBeams, TooManyCharacters,
                      TooManyItems, TooManyTexts)
from ..settings import Settings
from .language_support import serves
from .provider import ModelProvider, ServedModel
from .streams import all_or_none

AUTO = "auto"


def is_auto(source_lang: str | None, detect_missing: bool = True) -> bool:
    if source_lang is None:
        return detect_missing
    return source_lang.strip().lower() == AUTO


def _candidates(provider: ModelProvider, model: str | None, target_lang: str | None,
                everything: bool) -> list[ModelInfo]:
    """The models a text may go to: the one named; else those translating into the target; else (no target)
    the default model when translating (`everything` False) or every model when only detecting."""
    infos = [info for info in provider.models() if not info.speech]
    if model is not None:
        return [info for info in infos if info.id == model]
    if target_lang is not None:
        return [info for info in infos if serves(info.codes("target"), target_lang, "target")] or infos[:1]
    return infos if everything else infos[:1]


async def check_model(provider: ModelProvider, model: str | None) -> None:
    """A model named (None: the languages pick one) is a served translation model, as the registry resolves it:
    UnknownModel, or NotSpeechModel for a speech model, otherwise."""
    if model is not None:
        await provider.get(model)


def _source_languages(candidates: list[ModelInfo]) -> tuple[str, ...]:
    return detectable(lang.code for info in candidates for lang in info.source_languages)


def load_detection() -> None:
    """Reads py3langid's model now: otherwise the first request that detects reads it, on the event loop, and
    holds up every other request meanwhile. An app's start-up calls it."""
    detectable(())


def _ranked(text: str, languages: tuple[str, ...]) -> list[DetectedLanguage]:
    return [DetectedLanguage(lang, confidence) for lang, confidence in detect_language(text, languages)]


def _readable(text: str, field: str, markup: str) -> str:
    """What detection reads: the text, without its tags."""
    try:
        return text_content(text, markup)
    except MarkupError as e:
        raise InvalidMarkup(field, str(e)) from None


def detect(provider: ModelProvider, text: str, target_lang: str | None = None) -> list[DetectedLanguage]:
    """The served source languages (of the models translating into `target_lang`, if given) ranked for `text`,
    best first, confidences 0..1."""
    _check_characters(provider.settings, [text])
    return _ranked(text, _source_languages(_candidates(provider, None, target_lang, everything=True)))


def _check_count(settings: Settings, count: int, choices: int = 1) -> None:
    if count * choices > settings.max_texts:
        raise TooManyTexts(count, settings.max_texts, choices)


def check_items(count: int, limit: int) -> None:
    """An API's own cap on the texts of one request (DeepL's 50), checked where the API reads them."""
    if count > limit:
        raise TooManyItems(count, limit)


def _check_characters(settings: Settings, texts: Sequence[str]) -> None:
    """A request's characters, counted as sent (markup too: no DTD expands it, so the text translated is never
    more), before detection or the tokenizer reads them."""
    count = sum(map(len, texts))
    if count > settings.max_request_chars:
        raise TooManyCharacters(count, settings.max_request_chars)


def _check_lengths(texts: Sequence[str], names: Sequence[str], limit: int) -> None:
    for text, name in zip(texts, names):
        if len(text) > limit:
            raise TextTooLong(name, len(text), limit)


def _check_guidance(job: TranslationJob) -> None:
    """Instructions or style rules a job carries are refused: the models translate the text alone, and answering
    as if they had been followed would mislead the caller."""
    if job.instructions:
        raise NotFollowed("instructions")
    if job.style_rules is not None:
        raise NotFollowed("style rules")


def check_beams(settings: Settings, num_beams: int | None) -> None:
    """Beams asked for (None: the model's default) within the server's limit; speech's door asks it too."""
    if num_beams is not None and num_beams > settings.beam_limit:
        raise TooManyBeams(num_beams, settings.beam_limit)


async def translate(provider: ModelProvider, job: TranslationJob, model: str | None = None, *,
                    detect_missing: bool = True,
                    spending: AbstractAsyncContextManager = nullcontext()) -> TranslationResult:
    """`detect_missing` False: a missing source_lang means the model's default source (only "auto" detects).
    `spending`: the caller's charge for the work (front.access.Keys.spending), entered once the limits hold."""
    _check_count(provider.settings, len(job.texts))
    _check_guidance(job)
    return await _translate(provider, job, model, detect_missing, spending)


async def _translate(provider: ModelProvider, job: TranslationJob, model: str | None, detect_missing: bool,
                     spending: AbstractAsyncContextManager) -> TranslationResult:
    """Every translation passes here, a file's too (the request's limits bound its texts, not max_texts)."""
    settings = provider.settings
    _check_characters(settings, job.texts)
    _check_lengths(job.texts, job.fields, settings.max_document_chars)
    check_beams(settings, job.options.num_beams)
    async with spending:
        return await _translate_detected(provider, job, model, detect_missing)


async def _translate_detected(provider: ModelProvider, job: TranslationJob, model: str | None,
                              detect_missing: bool) -> TranslationResult:
    if not is_auto(job.source_lang, detect_missing):
        return await (await provider.get(model, job.source_lang, job.target_lang)).translate(job)
    candidates = _candidates(provider, model, job.target_lang, everything=False)
    languages = _source_languages(candidates)
    if len(languages) <= 1:
        result = await (await provider.get(model, None, job.target_lang)).translate(replace(job, source_lang=None))
        certain = DetectedLanguage(languages[0], 1.0) if languages else None
        return replace(result, texts=tuple(t if not text.strip() else replace(t, detected=certain)
                                           for t, text in zip(result.texts, job.texts)))
    detected = [_ranked(_readable(text, name, job.text_options.format), languages)[0] if text.strip() else None
                for text, name in zip(job.texts, job.fields)]
    return await _translate_groups(provider, model, job, detected)


async def generator(provider: ModelProvider, jobs: Sequence[GenerationJob], model: str | None = None,
                    per_text: int = 1) -> ServedModel:
    """The model that runs `jobs`, one a text (they share their languages), once their limits hold: the number of
    sequences (`per_text` of each text, as OpenAI's n asks), each text's characters, the beams."""
    settings = provider.settings
    _check_count(settings, len(jobs), per_text)
    _check_lengths([job.text for job in jobs], [job.field for job in jobs], settings.max_generate_chars)
    for job in jobs:
        check_beams(settings, job.options.num_beams)
    return await provider.get(model, jobs[0].source_lang, jobs[0].target_lang)


async def _translate_groups(provider: ModelProvider, model: str | None, job: TranslationJob,
                            detected: list[DetectedLanguage | None]) -> TranslationResult:
    """One job per detected language (empty texts ride with the first), run concurrently, merged in order."""
    groups: dict[str | None, list[int]] = {}
    for i, found in enumerate(detected):
        if found is not None:
            groups.setdefault(found.language, []).append(i)
    first = next(iter(groups), None)
    for i, found in enumerate(detected):
        if found is None:
            groups.setdefault(first, []).append(i)

    async def run(language: str | None, indices: list[int]) -> TranslationResult:
        part = replace(job, texts=tuple(job.texts[i] for i in indices), fields=tuple(job.fields[i] for i in indices),
                       source_lang=language)
        return await (await provider.get(model, language, job.target_lang)).translate(part)

    results = await all_or_none([run(language, indices) for language, indices in groups.items()])
    texts: list[TranslatedText | None] = [None] * len(job.texts)
    for indices, result in zip(groups.values(), results):
        for i, translated in zip(indices, result.texts):
            texts[i] = replace(translated, detected=detected[i])
    models = list(dict.fromkeys(r.model for r in results))
    sources = {r.source_lang for r in results}
    return TranslationResult(model=",".join(models), texts=tuple(texts),
                             source_lang=sources.pop() if len(sources) == 1 else None,
                             target_lang=results[0].target_lang,
                             input_tokens=sum(r.input_tokens for r in results),
                             output_tokens=sum(r.output_tokens for r in results))


async def read_document(provider: ModelProvider, data: bytes, suffix: str) -> ParsedFile:
    """A document file (any of model.SUFFIXES, the kind from `suffix`) read off the event loop. A damaged or
    unsupported file is a 400 naming the problem, one that would inflate past a limit a 413 naming it."""
    settings = provider.settings
    try:
        return await asyncio.to_thread(read_file, data, suffix, settings.max_file_expanded_bytes,
                                       settings.max_file_ratio)
    except FileTooLarge as e:
        raise BodyTooLarge(str(e), field="file", limit=e.limit) from None
    except FileError as e:
        raise BadBody(str(e), field="file") from None


def check_job(provider: ModelProvider, parsed: ParsedFile) -> None:
    """A document job's limits, checked when it is submitted: its text's characters together (max_job_chars), each
    text's (max_document_chars), and each within one request (max_request_chars) since a text is never split
    across the job's requests."""
    settings = provider.settings
    if parsed.characters > settings.max_job_chars:
        raise TooManyCharacters(parsed.characters, settings.max_job_chars)
    _check_lengths(parsed.texts, _file_fields(range(len(parsed.texts))),
                   min(settings.max_document_chars, settings.max_request_chars))


def _file_fields(indices: range) -> tuple[str, ...]:
    return tuple(f"file[{i}]" for i in indices)


def chunks(texts: Sequence[str], limit: int) -> list[range]:
    """Consecutive texts whose characters add up to at most `limit` each (a longer text alone)."""
    out, start, size = [], 0, 0
    for i, text in enumerate(texts):
        if i > start and size + len(text) > limit:
            out.append(range(start, i))
            start, size = i, 0
        size += len(text)
    return out + ([range(start, len(texts))] if texts else [])


async def translate_file(provider: ModelProvider, parsed: ParsedFile, source_lang: str | None,
                         target_lang: str | None, model: str | None = None,
                         spending: AbstractAsyncContextManager = nullcontext(), chunk_chars: int | None = None,
                         progress: Callable[[float], Awaitable[None]] | None = None,
                         glossary: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A file read by read_document, its texts translated (translate_texts) and written (off the event loop) in the
    same kind."""
    options = TextOptions(format=parsed.format, split_sentences="1" if parsed.format == "text" else "nonewlines",
                          non_splitting_tags=parsed.non_splitting_tags, ignore_tags=parsed.ignore_tags)
    translated = await translate_texts(provider, parsed.texts, source_lang, target_lang, model, options, spending,
                                       chunk_chars, progress, glossary)
    try:
        return await asyncio.to_thread(parsed.write, translated)
    except FileError as e:  # a file its library reads but cannot write back
        raise BadBody(str(e), field="file") from None


async def translate_texts(provider: ModelProvider, texts: Sequence[str], source_lang: str | None,
                          target_lang: str | None, model: str | None = None, options: TextOptions = TextOptions(),
                          spending: AbstractAsyncContextManager = nullcontext(), chunk_chars: int | None = None,
                          progress: Callable[[float], Awaitable[None]] | None = None,
                          glossary: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """A file's texts (cues, paragraphs) translated as one job, whose sentences the model's engine takes a window at
    a time: the request's limits, not max_texts, bound a file. A document job gives `chunk_chars`: its texts then go
    as consecutive jobs of at most that many characters (within max_request_chars), each one request of the
    scheduler's fair share, and `progress(share done, 0..1)` is awaited after each. `glossary`: the (source term,
    target term) pairs."""
    limit = min(chunk_chars, provider.settings.max_request_chars) if chunk_chars else sum(map(len, texts))
    translated: list[str] = []
    async with spending:
        for part in chunks(texts, limit):
            job = TranslationJob(texts=tuple(texts[i] for i in part), fields=_file_fields(part),
                                 source_lang=source_lang, target_lang=target_lang, text_options=options,
                                 glossary=glossary)
            result = await _translate(provider, job, model, False, nullcontext())
            translated += [t.text for t in result.texts]
            if progress is not None:
                await progress(sum(map(len, texts[:part.stop])) / sum(map(len, texts)))
    return translated
