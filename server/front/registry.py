"""The models a server may serve: names, checkpoint paths, families and languages, without loading weights.

Built from checkpoint directories, or from directories of checkpoint directories (one model each).
Requests name a model, or a language pair that resolves to one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from model import (CheckpointError, demo_model_dir, is_repo_id, iso_code, kernels_for, load, new_tokens_within,
                   resolve_placement)

from ..domain import LanguageInfo, ModelInfo
from ..errors import NotSpeechModel, UnknownModel
from ..settings import Settings
from .language_support import serves

DEMO_MODEL_NAME = "demo-numbers"
DEMO_SPEECH_MODEL_NAME = "demo-spoken-numbers"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: str
    family: str
    source_langs: tuple[str, ...]  # the model's own codes; () = not declared
    target_langs: tuple[str, ...]
    default_beams: int
    max_positions: int
    chat_template: str | None = None
    speech: bool = False  # takes audio (model.SpeechWindows), not text

    @property
    def pairs(self) -> int:
        """How many language pairs the model serves: fewer = more specific (wins routing)."""
        return max(len(self.source_langs), 1) * max(len(self.target_langs), 1)

    def serves(self, source_lang: str | None, target_lang: str) -> bool:
        return serves(self.target_langs, target_lang, "target") and (
            source_lang is None or serves(self.source_langs, source_lang, "source"))


def describe(name: str, path: Path | str) -> ModelEntry:
    bundle = load(path, weights=False)
    langs = bundle.languages
    return ModelEntry(name, str(path), bundle.family, tuple(langs.source), tuple(langs.target),
                      bundle.generation.num_beams, bundle.max_positions, bundle.chat_template,
                      speech=bundle.config.num_mel_bins is not None)


def model_limits(settings: Settings, max_positions: int) -> Settings:
    """The server's limits, clamped to what a model's positions allow (the one place this is computed)."""
    return replace(settings, max_input_tokens=min(settings.max_input_tokens, max_positions),
                   max_new_tokens=min(settings.max_new_tokens, new_tokens_within(max_positions)))


def model_info(entry: ModelEntry, settings: Settings) -> ModelInfo:
    limits = model_limits(settings, entry.max_positions)
    device, dtype = resolve_placement(settings.device, settings.dtype)
    return ModelInfo(
        id=entry.name, family=entry.family,
        source_languages=tuple(LanguageInfo(c, iso_code(c)) for c in entry.source_langs),
        target_languages=tuple(LanguageInfo(c, iso_code(c)) for c in entry.target_langs),
        default_beam_size=entry.default_beams, max_texts=limits.max_texts, max_input_tokens=limits.max_input_tokens,
        max_new_tokens=limits.max_new_tokens, max_beams=limits.beam_limit, max_request_chars=limits.max_request_chars,
        max_document_chars=limits.max_document_chars, max_generate_chars=limits.max_generate_chars,
        chat_template=entry.chat_template, speech=entry.speech,
        max_audio_bytes=settings.max_audio_bytes if entry.speech else None,
        max_audio_seconds=settings.max_audio_seconds if entry.speech else None,
        device=device, dtype=dtype, kernels=kernels_for(dtype) if device == "cpu" else None)


class ModelRegistry:
    def __init__(self, entries: list[ModelEntry]):
        if not entries:
            raise ValueError("no models to serve")
        self.entries = {e.name: e for e in entries}

    @classmethod
    def from_paths(cls, paths: list[str] | None) -> "ModelRegistry":
        """Each path is a checkpoint, a directory of checkpoints or a Hub repo id (named as given; each process
        that loads it resolves it in its own cache); no paths = the embedded demo models (text and speech).
        CheckpointError naming the model that cannot be described."""
        if not paths:
            return cls([describe(DEMO_MODEL_NAME, demo_model_dir()),
                        describe(DEMO_SPEECH_MODEL_NAME, demo_model_dir(speech=True))])
        entries = []
        for raw in paths:
            path = Path(raw).resolve()
            if (path / "config.json").exists():
                entries.append(describe(path.name, path))
            elif path.is_dir():
                entries += [describe(p.name, p) for p in sorted(path.iterdir()) if (p / "config.json").exists()]
            elif is_repo_id(raw):
                entries.append(describe(raw, raw))
            else:
                raise CheckpointError(f"{raw}: not a checkpoint, a directory of checkpoints or a Hub repo id "
                                      f"(ORG/NAME[@REVISION])")
        return cls(entries)

    def resolve(self, model: str | None, source_lang: str | None = None, target_lang: str | None = None,
                speech: bool = False) -> str:
        """The model to use, of the kind the request needs (`speech`: one that takes audio; else text): the one
        named; else, of the models that translate source_lang → target_lang, the most specific (a bilingual model
        over a many-to-many one; first registered on a tie); else the first of its kind (which then reports what it
        supports). NotSpeechModel for a model of the other kind, or none of the kind served."""
        kind = [e for e in self.entries.values() if e.speech == speech]
        if model is not None:
            if model not in self.entries:
                raise UnknownModel(f"model {model!r} is not served here; available: {', '.join(self.entries)}",
                                   field="model", limit=list(self.entries))
            if self.entries[model].speech != speech:
                raise NotSpeechModel(model, speech, [e.name for e in kind])
            return model
        if not kind:
            raise NotSpeechModel(None, speech, [])
        if target_lang is not None:
            serving = [e for e in kind if e.serves(source_lang, target_lang)]
            if serving:
                return min(serving, key=lambda e: e.pairs).name
        return kind[0].name
