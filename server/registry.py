"""The models a server may serve: names, checkpoint paths and languages, without loading any weights.

Built from checkpoint directories, or from directories of checkpoint directories (one model each).
Requests name a model, or a language pair that resolves to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model.config import load_configs
from model.tokenizer import MarianTokenizer
from model.translator import demo_model_dir, target_languages

from .errors import UnknownModel

DEMO_MODEL_NAME = "demo-numbers"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: str
    source_lang: str | None
    target_langs: tuple[str, ...]
    default_beams: int


def describe(name: str, path: Path) -> ModelEntry:
    tokenizer = MarianTokenizer.from_pretrained(path)
    _, generation = load_configs(path)
    return ModelEntry(name, str(path), tokenizer.source_lang, tuple(target_languages(tokenizer)),
                      generation.num_beams)


class ModelRegistry:
    def __init__(self, entries: list[ModelEntry]):
        if not entries:
            raise ValueError("no models to serve")
        self.entries = {e.name: e for e in entries}
        self.default = entries[0].name

    @classmethod
    def from_paths(cls, paths: list[str] | None) -> "ModelRegistry":
        """Each path is a checkpoint or a directory of checkpoints; no paths = the embedded demo model."""
        if not paths:
            return cls([describe(DEMO_MODEL_NAME, demo_model_dir())])
        entries = []
        for raw in paths:
            path = Path(raw).resolve()
            if (path / "config.json").exists():
                entries.append(describe(path.name, path))
            elif path.is_dir():
                entries += [describe(p.name, p) for p in sorted(path.iterdir()) if (p / "config.json").exists()]
            else:
                raise FileNotFoundError(f"{raw}: not a checkpoint or a directory of checkpoints")
        return cls(entries)

    def resolve(self, model: str | None, source_lang: str | None = None, target_lang: str | None = None) -> str:
        """The model to use: the one named, else the first that translates source_lang → target_lang, else the
        default (which then reports what it supports)."""
        if model is not None:
            if model not in self.entries:
                raise UnknownModel(f"model {model!r} is not served here; available: {', '.join(self.entries)}",
                                   field="model", limit=list(self.entries))
            return model
        if target_lang is not None:
            for entry in self.entries.values():
                if target_lang in entry.target_langs and source_lang in (None, entry.source_lang):
                    return entry.name
        return self.default
