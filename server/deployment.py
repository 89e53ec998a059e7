"""Ray Serve: an ingress deployment running the same FastAPI app, in front of a multiplexed model deployment.

    serve run server.deployment:build_app model=/models/opus-mt-en-de,/models/opus-mt-en-fr
    python -m server                      # local Ray on 127.0.0.1 with the demo model (see server.ray_main)

Ingress (FastAPI, light) → ModelServer replicas (engines). Requests carry the model id as Serve's multiplexed
model id, so they reach a replica that has the model loaded (LRU, at most max_models_per_replica per replica);
each model has its own engine, so batches never mix models.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import AsyncIterator

import torch
import ray
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from . import metrics
from .app import create_app
from .errors import EngineFailed, QueueFull, ServerError
from .local import load_service, services_health, set_engine_threads
from .domain import GenerationJob, GenerationResult, ModelInfo, StreamEvent, TranslationJob, TranslationResult
from .registry import ModelRegistry, model_info
from .service import ModelService
from .settings import Settings

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


class LoadedModel:
    """A model held by Serve's multiplexer; Serve calls __del__ when it evicts the model."""

    def __init__(self, service: ModelService, on_unload):
        self.service, self.on_unload = service, on_unload

    def __del__(self):
        self.on_unload(self.service.name)
        self.service.close()


def model_server_class(max_models_per_replica: int):
    @serve.deployment(name="ModelServer", max_ongoing_requests=256, health_check_period_s=5,
                      health_check_timeout_s=10, ray_actor_options={"num_cpus": 1})
    class ModelServer:
        def __init__(self, settings: Settings, registry: ModelRegistry):
            if settings.device == "auto":  # a GPU only if Ray assigned this replica one (it no longer hides them)
                settings = replace(settings, device="cuda" if ray.get_gpu_ids() else "cpu")
            self.settings, self.registry = settings, registry
            metrics.enable_ray_export()
            # Ray sets OMP_NUM_THREADS to the replica's num_cpus: its share of the machine
            set_engine_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()), settings)
            self.loaded: dict[str, ModelService] = {}

        @serve.multiplexed(max_num_models_per_replica=max_models_per_replica)
        async def load(self, model_id: str) -> LoadedModel:
            entry = self.registry.entries[model_id]
            service = await asyncio.get_running_loop().run_in_executor(None, load_service, entry, self.settings)
            self.loaded[model_id] = service
            return LoadedModel(service, lambda name: self.loaded.pop(name, None))

        async def service(self) -> ModelService:
            return (await self.load(serve.get_multiplexed_model_id())).service

        async def translate(self, job: TranslationJob) -> TranslationResult:
            return await (await self.service()).translate(job)

        async def generate(self, job: GenerationJob) -> GenerationResult:
            return await (await self.service()).generate(job)

        async def generate_stream(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
            async for event in (await self.service()).generate_events(job):
                yield event

        def health(self, stale_after_s: float) -> tuple[bool, str]:
            return services_health(list(self.loaded.values()), stale_after_s)

        def check_health(self) -> None:
            """Serve calls this periodically; a dead or stuck engine loop gets the replica replaced."""
            ok, detail = self.health(self.settings.health_stale_s)
            if not ok:
                raise RuntimeError(detail)

        def stop_engines(self) -> None:
            """Stop every engine loop of this replica (its health check then fails and Serve replaces it)."""
            for service in self.loaded.values():
                service.loop.stop()

        def describe(self) -> dict:
            """Which replica and node this is, and the models it holds (most recently loaded last)."""
            return {"replica": serve.get_replica_context().replica_id.unique_id, "pid": os.getpid(),
                    "node": ray.get_runtime_context().get_node_id(), "models": list(self.loaded)}

    return ModelServer


def unwrap(error: Exception) -> Exception:
    """Errors from a model replica → the error an HTTP client should see."""
    if isinstance(error, RayTaskError) and isinstance(error.cause, ServerError):
        return error.cause
    if isinstance(error, BackPressureError):
        return QueueFull("all model replicas are at their queue limit; retry later")
    if isinstance(error, RayActorError):
        return EngineFailed("the replica serving this request died; retry")
    return error


class RemoteModel:
    """The ModelService interface the app uses, forwarded to the ModelServer replica holding the model."""

    def __init__(self, handle: DeploymentHandle, name: str):
        self.name, self.handle = name, handle.options(multiplexed_model_id=name)

    async def translate(self, job: TranslationJob) -> TranslationResult:
        try:
            return await self.handle.translate.remote(job)
        except Exception as e:
            raise unwrap(e) from None

    async def generate(self, job: GenerationJob) -> GenerationResult:
        try:
            return await self.handle.generate.remote(job)
        except Exception as e:
            raise unwrap(e) from None

    async def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        stream = self.handle.options(stream=True).generate_stream.remote(job)
        try:
            async for event in stream:
                yield event
        except Exception as e:
            raise unwrap(e) from None
        finally:
            stream.cancel()


class RayModels:
    """ModelProvider for the app inside the ingress replica."""

    def __init__(self, handle: DeploymentHandle, registry: ModelRegistry, settings: Settings):
        self.handle, self.registry, self.settings = handle, registry, settings

    async def get(self, name: str | None, source_lang: str | None = None, target_lang: str | None = None):
        return RemoteModel(self.handle, self.registry.resolve(name, source_lang, target_lang))

    def models(self) -> list[ModelInfo]:
        return [model_info(entry, self.settings) for entry in self.registry.entries.values()]

    async def health(self, stale_after_s: float) -> tuple[bool, str]:
        try:
            return await asyncio.wait_for(self.handle.health.remote(stale_after_s), timeout=5)
        except Exception as e:  # no replica answered in time
            return False, f"model replicas unavailable: {type(e).__name__}"

    def metrics_text(self) -> bytes:
        """One scrape for every replica process on this node (prometheus-client multiprocess mode)."""
        if METRICS_DIR_ENV not in os.environ:
            return generate_latest(REGISTRY)
        metrics.reap_dead_processes(os.environ[METRICS_DIR_ENV])
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=os.environ[METRICS_DIR_ENV])
        return generate_latest(registry)


@serve.deployment(name="Ingress", max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0})
@serve.ingress()
class Ingress:
    def __init__(self, model_server: DeploymentHandle, registry: ModelRegistry, settings: Settings):
        metrics.enable_ray_export()
        self.provider = RayModels(model_server, registry, settings)
        self.settings = settings

    def __serve_build_asgi_app__(self):
        return create_app(self.provider, self.settings)


def build(settings: Settings, registry: ModelRegistry, max_models_per_replica: int = 4, replicas: int = 1,
          num_cpus: float = 1, num_gpus: float = 0, health_check_period_s: float = 5):
    """The application: Ingress → ModelServer, with replica counts and resources set here (or by a config).

    A replica takes as many requests as its engine can hold (batch rows + queue); beyond that Serve queues up
    to max_queued_requests per caller, then answers BackPressureError (503 here)."""
    model_server = model_server_class(max_models_per_replica).options(
        num_replicas=replicas,
        max_ongoing_requests=settings.max_batch_rows + settings.max_queued_requests,
        max_queued_requests=settings.max_queued_requests,
        health_check_period_s=health_check_period_s,
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
    )
    return Ingress.bind(model_server.bind(settings, registry), registry, settings)


def build_app(args: dict):
    """`serve run server.deployment:build_app model=DIR[,DIR...] max_models_per_replica=N key=value...`;
    other keys are Settings fields (max_batch_rows=32, device=cuda, ...). Replicas, autoscaling and resources
    come from the Serve config's `deployments:` section (see deploy/serve_config.yaml)."""
    args = dict(args)
    paths = [p for p in str(args.pop("model", "") or "").split(",") if p]
    max_models = int(args.pop("max_models_per_replica", 4))
    num_gpus = 1 if torch.cuda.is_available() else 0
    settings = Settings.from_env(**{k: Settings.coerce(k, v) for k, v in args.items()})
    return build(settings, ModelRegistry.from_paths(paths), max_models, num_gpus=num_gpus)
