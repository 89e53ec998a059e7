"""In-process models: load checkpoints once and serve them from this process (no Ray)."""

from __future__ import annotations

from pathlib import Path

import torch
from prometheus_client import REGISTRY, generate_latest

from model.translator import Translator, demo_model_dir

from .errors import UnknownModel
from .schemas import ModelCard
from .service import ModelService
from .settings import Settings

DEMO_MODEL_NAME = "demo-numbers"


def resolve_device(settings: Settings) -> tuple[str, str]:
    device = settings.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = settings.dtype
    if dtype == "auto":
        dtype = "float16" if device.startswith("cuda") else "float32"
    return device, dtype


def model_name(path: str | None) -> str:
    return DEMO_MODEL_NAME if path is None else Path(path).resolve().name


def load_service(path: str | None, settings: Settings) -> ModelService:
    device, dtype = resolve_device(settings)
    translator = Translator.from_pretrained(path or demo_model_dir(), device=device, dtype=dtype)
    return ModelService(model_name(path), translator, settings)


class LocalModels:
    def __init__(self, settings: Settings, paths: list[str | None]):
        self.services: dict[str, ModelService] = {}
        for path in paths or [None]:
            service = load_service(path, settings)
            self.services[service.name] = service
        self.default = next(iter(self.services))

    async def get(self, name: str | None) -> ModelService:
        service = self.services.get(name or self.default)
        if service is None:
            raise UnknownModel(f"model {name!r} is not served here; available: {', '.join(self.services)}",
                               field="model", limit=list(self.services))
        return service

    def cards(self) -> list[ModelCard]:
        return [s.card() for s in self.services.values()]

    def health(self, stale_after_s: float) -> tuple[bool, str]:
        for name, service in self.services.items():
            if not service.loop.alive:
                return False, f"{name}: the engine loop has stopped"
            if service.loop.seconds_since_progress() > stale_after_s:
                return False, f"{name}: no engine progress for {service.loop.seconds_since_progress():.1f} s"
        return True, f"{len(self.services)} model(s) loaded"

    def metrics_text(self) -> bytes:
        return generate_latest(REGISTRY)

    def close(self) -> None:
        for service in self.services.values():
            service.close()
