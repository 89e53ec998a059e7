"""In-process models (no Ray): every registered model is loaded once and served from this process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import torch

from model import ModelBundle, load

from . import metrics
from .domain import ModelInfo
from .registry import ModelEntry, ModelRegistry, model_info, model_limits
from .service import ModelService
from .settings import Settings

T = TypeVar("T")


def resolve_device(settings: Settings) -> tuple[str, str]:
    """`auto`: the GPU when there is one, float16 there and float32 on the CPU."""
    device = settings.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = settings.dtype
    if dtype == "auto":
        dtype = "float16" if device.startswith("cuda") else "float32"
    return device, dtype


def set_engine_threads(cpus: float, settings: Settings) -> int:
    """Torch intra-op threads for CPU engines given `cpus` cores: an engine's encoder and decoder threads run at
    once, a core each at most, and more intra-op threads than cores makes OpenMP spin-wait against the HTTP
    side and each other (measured on 2 cores: the engine loop at 2 threads served 0.7× what it does at 1)."""
    if resolve_device(settings)[0] != "cpu":
        return torch.get_num_threads()
    threads = max(1, int(cpus) // 2)
    torch.set_num_threads(threads)
    return threads


def in_passing_thread(build: Callable[[], T]) -> T:
    """build() in a thread that then exits: for loading a model and building its engine (the KV cache is
    allocated there).

    Why: on the CPU each thread that runs torch operators keeps an OpenMP team (intra-op threads − 1 workers) for as
    long as it lives. An engine runs operators in two threads, its decoder steps and its encoder passes; had a
    third team lived on beside theirs, the process would hold more OpenMP threads than cores (at intra-op threads =
    cores / 2, as set_engine_threads gives them), and libgomp then lets idle workers spin only briefly before
    sleeping, so every operator waits for its team to wake up. Measured on 2 cores with 2 intra-op threads,
    opus-mt-en-de shape, decoding in a thread other than the loading one, tokens/s with the loading thread alive /
    gone: int8 greedy batch 1 156 → 260, float32 66 → 94, float32 greedy batch 32 780 → 1,010."""
    with ThreadPoolExecutor(1, thread_name_prefix="model-load") as thread:
        return thread.submit(build).result()


def load_weights(path: str | None, settings: Settings) -> ModelBundle:
    """The model with its weights on the device and in the dtype the settings resolve to."""
    device, dtype = resolve_device(settings)
    return load(path, device=device, dtype=dtype, pack_tied_output=settings.pack_tied_output,
                traced=settings.traced)


def load_service(entry: ModelEntry, settings: Settings) -> ModelService:
    """A model served from this process (`--no-ray`, or a Ray Serve replica): with `engine_process` on the CPU, its
    weights and engine loop in a child process (engine_process.EngineProcess) and only its tokenizer here;
    otherwise all of it here."""
    device = resolve_device(settings)[0]
    if settings.engine_process and device == "cpu":
        from .engine_process import EngineProcess

        bundle = load(entry.path, weights=False)
        engine = EngineProcess(entry.path, model_limits(settings, bundle.max_positions), entry.name,
                               torch.get_num_threads())
        return ModelService(entry.name, bundle, settings, engine)

    def build() -> ModelService:
        return ModelService(entry.name, load_weights(entry.path, settings), settings)

    # On a GPU the CUDA graphs are captured where the engine is built: kept in this thread, as they were tested.
    return in_passing_thread(build) if device == "cpu" else build()


def services_health(services: list[ModelService], stale_after_s: float) -> tuple[bool, str]:
    for service in services:
        if not service.loop.alive:
            return False, f"{service.name}: the engine loop has stopped"
        if service.loop.seconds_since_progress() > stale_after_s:
            return False, f"{service.name}: no engine progress for {service.loop.seconds_since_progress():.1f} s"
    return True, f"{len(services)} model(s) loaded"


class LocalModels:
    def __init__(self, settings: Settings, registry: ModelRegistry):
        self.registry, self.settings = registry, settings
        self.services = {name: load_service(entry, settings) for name, entry in registry.entries.items()}

    async def get(self, name: str | None, source_lang: str | None = None,
                  target_lang: str | None = None) -> ModelService:
        return self.services[self.registry.resolve(name, source_lang, target_lang)]

    def models(self) -> list[ModelInfo]:
        return [model_info(entry, self.settings) for entry in self.registry.entries.values()]

    async def health(self, stale_after_s: float) -> tuple[bool, str]:
        return services_health(list(self.services.values()), stale_after_s)

    def metrics_text(self) -> bytes:
        return metrics.scrape()

    def close(self) -> None:
        for service in self.services.values():
            service.close()
