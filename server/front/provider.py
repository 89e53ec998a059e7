"""What the API layer asks of the models it serves, whichever process holds them: a provider of models (the
models of this process, runtime.local.LocalModels, or of a Ray Serve deployment, runtime.forwarding.ReplicaModels)
and a served model (HeldModel here, or runtime.forwarding.RemoteModel forwarding to another replica)."""

from __future__ import annotations

from typing import AsyncIterator, Protocol

from model import Segment, Transcript

from ..domain import (GenerationJob, GenerationResult, ModelInfo, SpeechJob, StreamEvent, TranslationJob,
                      TranslationResult)
from ..settings import Settings


class ServedModel(Protocol):
    name: str

    async def translate(self, job: TranslationJob) -> TranslationResult: ...

    async def generate(self, job: GenerationJob) -> GenerationResult: ...

    def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]: ...

    def transcribe_events(self, job: SpeechJob) -> AsyncIterator[Segment | Transcript]: ...


class ModelProvider(Protocol):
    settings: Settings

    async def get(self, name: str | None, source_lang: str | None = None, target_lang: str | None = None,
                  speech: bool = False) -> ServedModel:
        """The model named, else the one the language pair resolves to, of the kind asked for (a `speech` model
        takes audio): registry.ModelRegistry.resolve."""

    def models(self) -> list[ModelInfo]: ...

    async def health(self, stale_after_s: float) -> tuple[bool, str]: ...

    def metrics_text(self) -> bytes: ...
