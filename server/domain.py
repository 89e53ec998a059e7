"""Domain jobs and results: what every API (native, LibreTranslate, DeepL) maps its requests to.

Plain dataclasses: they cross the Ray boundary cheaply and carry no HTTP or pydantic types.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy
    from model import SpeechOptions


@dataclass(frozen=True)
class DecodeOptions:
    """The decoding knobs a request may choose, as every API names them once mapped; None = the model's default."""

    max_new_tokens: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    n_best: int = 1
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_new_tokens: int | None = None

    def choices(self) -> dict:
        """The knobs given, by the search's names (model.DecodeParams): the one mapping between the two."""
        chosen = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "n_best"}
        return {k: v for k, v in chosen.items() if v is not None} | {"num_return_sequences": self.n_best}


@dataclass(frozen=True)
class TextOptions:
    """How a text is cut into sequences and put back together (the documents layer)."""

    format: str = "text"  # "text" | "html" | "xml"
    split_sentences: str = "1"  # "0": one unit; "1": lines, then sentences; "nonewlines": sentences only
    ignore_tags: tuple[str, ...] = ()  # markup: elements whose contents come back untouched
    non_splitting_tags: tuple[str, ...] = ()  # markup: elements that never cut a sentence
    splitting_tags: tuple[str, ...] = ()  # markup: elements that always cut one


@dataclass(frozen=True)
class TranslationJob:
    texts: tuple[str, ...]
    fields: tuple[str, ...]  # how each text is named in errors: "text", "text[3]", "q[1]"
    source_lang: str | None = None  # None or "auto": detected per text among the served source languages
    target_lang: str | None = None
    options: DecodeOptions = DecodeOptions()
    text_options: TextOptions = TextOptions()
    # (source term, target term) pairs a glossary fixes: where a source term occurs in a sentence, its target term
    # appears in that sentence's translation
    glossary: tuple[tuple[str, str], ...] = ()
    instructions: tuple[str, ...] = ()  # free-text instructions to the translator (refused: front.dispatch)
    style_rules: str | None = None  # the id of a stored style-rule list (refused: front.dispatch)


@dataclass(frozen=True)
class SpeechJob:
    """Audio to transcribe (or translate into English, `options.task`): 16 kHz mono samples (front.speech decodes
    the file), with the speech model's knobs (model.SpeechOptions)."""

    samples: numpy.ndarray
    options: SpeechOptions


@dataclass(frozen=True)
class DetectedLanguage:
    language: str  # ISO 639-1 where the language has one, else ISO 639-3
    confidence: float  # 0..1


@dataclass(frozen=True)
class ScoredText:
    text: str
    score: float


@dataclass(frozen=True)
class TranslatedText:
    text: str
    score: float | None  # None for an empty text (nothing decoded)
    alternatives: tuple[ScoredText, ...] = ()
    detected: DetectedLanguage | None = None  # set when the source language was detected for this text


@dataclass(frozen=True)
class TranslationResult:
    model: str
    texts: tuple[TranslatedText, ...]
    source_lang: str | None  # the model's codes used
    target_lang: str | None
    input_tokens: int
    output_tokens: int  # generated tokens of the returned (best) hypotheses, </s> and language tokens included


@dataclass(frozen=True)
class GenerationJob:
    text: str
    options: DecodeOptions = DecodeOptions()
    stop: tuple[str, ...] = ()
    source_lang: str | None = None  # translation models: which languages (else the model's defaults)
    target_lang: str | None = None
    field: str = "text"  # how the text is named in errors: "text", "prompt[1]", "messages"


@dataclass(frozen=True)
class StreamEvent:
    """A piece of generated text; the last event has finish_reason and the token counts."""

    text: str = ""
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class GenerationResult:
    model: str
    text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LanguageInfo:
    code: str  # the model's own code
    iso: str | None  # ISO 639-1 where the language has one, else ISO 639-3


@dataclass(frozen=True)
class ModelInfo:
    """What /v1/models (and other APIs' language lists) say about one model; computed in one place."""

    id: str
    family: str
    source_languages: tuple[LanguageInfo, ...]
    target_languages: tuple[LanguageInfo, ...]
    default_beam_size: int
    max_texts: int
    max_input_tokens: int
    max_new_tokens: int
    max_beams: int
    max_request_chars: int  # characters of a translate request's texts together (the page counts against these)
    max_document_chars: int  # of one text of a translate request
    max_generate_chars: int  # of a /v1/generate text
    chat_template: str | None = None  # the checkpoint's own (tokenizer_config.json), for OpenAI's chat
    speech: bool = False  # takes audio, not text: served by the audio routes only
    max_audio_bytes: int | None = None  # a speech model's: of one audio file, and its duration (the page's bounds)
    max_audio_seconds: float | None = None
    device: str = "cpu"  # where its weights run, and in which number format (`auto` resolved)
    dtype: str = "float32"
    kernels: str | None = None  # on a CPU: the instruction sets its kernels may use (oneDNN's rung, ATen's)
    replicas: int | None = None  # Ray Serve: the application's model replicas now; None without Serve

    def codes(self, side: str) -> tuple[str, ...]:
        """The model's own codes of its "source" or "target" languages."""
        return tuple(lang.code for lang in (self.source_languages if side == "source" else self.target_languages))
