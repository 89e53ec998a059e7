"""Models served from this process (`--no-ray`, a --no-ray worker, a Ray Serve replica): each model's tokenizer
and service here, its weights and engine loop here too or, on the CPU with `engine_process`, in a child process."""

from __future__ import annotations

import torch

from model import load, resolve_placement

from .. import metrics
from ..domain import ModelInfo
from ..front import HeldModel, ModelEntry, ModelRegistry, model_info, model_limits
from ..engine.loop import start_engine_loop
from ..metrics import EngineStats
from ..settings import Settings
from .engine_process import EngineProcess
from .process import in_passing_thread, load_weights


def load_service(entry: ModelEntry, settings: Settings) -> HeldModel:
    """The model at `entry` served from this process: with `engine_process` on the CPU, its weights and engine loop
    in a child process and only its tokenizer here; otherwise all of it here."""
    device = resolve_placement(settings.device, settings.dtype)[0]
    if settings.engine_process and device == "cpu":
        bundle = load(entry.path, weights=False)
        limits = model_limits(settings, bundle.max_positions)
        return HeldModel(entry.name, bundle, limits,
                            EngineProcess(entry.path, limits, entry.name, torch.get_num_threads()))

    def build() -> HeldModel:
        bundle = load_weights(entry.path, settings)
        limits = model_limits(settings, bundle.max_positions)
        engine = start_engine_loop(bundle, limits, EngineStats(entry.name), limits.max_waiting_sequences)
        return HeldModel(entry.name, bundle, limits, engine)

    # On a GPU the CUDA graphs are captured where the engine is built: kept in this thread, as they were tested.
    return in_passing_thread(build) if device == "cpu" else build()


def services_health(services: list[HeldModel], stale_after_s: float) -> tuple[bool, str]:
    for service in services:
        if not service.engine.alive:
            return False, f"{service.name}: the engine loop has stopped"
        if service.engine.seconds_since_progress() > stale_after_s:
            return False, f"{service.name}: no engine progress for {service.engine.seconds_since_progress():.1f} s"
    return True, f"{len(services)} model(s) loaded"


class RegisteredModels:
    """What every ModelProvider (front.ModelProvider) of this server answers alike, wherever its models are loaded:
    the registry's models, and the metrics of this node."""

    def __init__(self, settings: Settings, registry: ModelRegistry):
        self.registry, self.settings = registry, settings

    def models(self) -> list[ModelInfo]:
        return [model_info(entry, self.settings) for entry in self.registry.entries.values()]

    def metrics_text(self) -> bytes:
        """This process's metrics, or in multiprocess mode (workers, Serve replicas) every process's on this node."""
        return metrics.scrape()


class LocalModels(RegisteredModels):
    """The ModelProvider of a process that loads every registered model itself."""

    def __init__(self, settings: Settings, registry: ModelRegistry):
        super().__init__(settings, registry)
        self.services = {name: load_service(entry, settings) for name, entry in registry.entries.items()}

    async def get(self, name: str | None, source_lang: str | None = None, target_lang: str | None = None,
                  speech: bool = False) -> HeldModel:
        return self.services[self.registry.resolve(name, source_lang, target_lang, speech)]

    async def health(self, stale_after_s: float) -> tuple[bool, str]:
        return services_health(list(self.services.values()), stale_after_s)

    def close(self) -> None:
        for service in self.services.values():
            service.close()
