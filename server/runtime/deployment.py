"""Ray Serve: one deployment, ModelServer, whose replicas run the FastAPI app beside their engines.

    serve run server.runtime.deployment:build_app model=/models/opus-mt-en-de,/models/opus-mt-en-fr
    python -m server                      # local Ray on 127.0.0.1 with the demo model (see runtime.ray_main)

With `replica_http` (what `python -m server` runs) each replica serves HTTP on host:port itself, on a socket
shared with the node's other replicas through SO_REUSEPORT: no Serve proxy and no hop between processes (a fraction
of the CPU per request, loadtests/README.md). Otherwise
Serve's proxy hands each request to a replica, which serves it the same way. A request for a model this replica
does not hold goes on, as a plain domain job, through Serve's model multiplexing to a replica that holds it or
loads it (LRU, at most `max_models_per_replica` per replica), or is served right here when Serve picks this
replica; each model has its own engine, so batches never mix models.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator

import torch
import ray
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve import metrics as ray_metrics
from ray.serve.handle import DeploymentHandle

from .. import metrics
from ..api import create_app
from ..domain import GenerationJob, GenerationResult, ModelInfo, StreamEvent, TranslationJob, TranslationResult
from ..errors import EngineFailed, QueueFull, ServerError
from ..front import ModelRegistry, ModelService, model_info
from ..settings import Settings
from .cluster_keys import cluster_key_store
from .listen import reuseport_socket, uvicorn_server
from .local import load_service, services_health
from .process import set_engine_threads

if TYPE_CHECKING:
    from ray.serve._private.request_router.replica_wrapper import ReplicaSelection

CONTROL_REQUESTS = 64  # a replica's room beyond its engines' rows and queues: /healthz, /metrics, quick refusals


class LoadedModel:
    """A model held by Serve's multiplexer; Serve calls __del__ when it evicts the model."""

    def __init__(self, service: ModelService, on_unload):
        self.service, self.on_unload = service, on_unload

    def __del__(self):
        self.on_unload(self.service.name)
        self.service.close()


def model_server_class(max_models_per_replica: int):
    """The deployment's class; Serve's multiplexer takes its model count when the class is made."""
    # Serve's graceful shutdown sleeps one wait loop before it first looks for ongoing requests (2 s by default),
    # so every stop, redeploy or replica replacement paid 2 s; __del__ drains this replica's own HTTP server.
    @serve.deployment(name="ModelServer", max_ongoing_requests=256, health_check_period_s=5,
                      health_check_timeout_s=10, graceful_shutdown_wait_loop_s=0.25,
                      ray_actor_options={"num_cpus": 1})
    @serve.ingress()
    class ModelServer:
        def __init__(self, settings: Settings, registry: ModelRegistry):
            if settings.device == "auto":  # a GPU only if Ray assigned this replica one (it no longer hides them)
                settings = replace(settings, device="cuda" if ray.get_gpu_ids() else "cpu")
            self.settings, self.registry = settings, registry
            self.http = None  # with replica_http: (uvicorn server, its serving task), started with the app
            if not settings.replica_http:  # a request's replica may be on any node; else each node serves its own
                metrics.enable_ray_export(ray_metrics)
            # Ray sets OMP_NUM_THREADS to the replica's num_cpus: its share of the machine
            set_engine_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()), settings)
            self.loaded: dict[str, ModelService] = {}

        def __serve_build_asgi_app__(self):
            app = create_app(ReplicaModels(self), self.settings, cluster_key_store(self.settings.key_store))
            if self.settings.replica_http:  # Serve runs the app's lifespan; this server only serves requests
                server = uvicorn_server(app, self.settings, lifespan="off")
                sock = reuseport_socket(self.settings.host, self.settings.port)
                self.http = server, asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
            return app

        async def __del__(self):
            """Serve's graceful shutdown: this replica's HTTP server stops accepting and drains, then the app
            shuts down."""
            if getattr(self, "http", None) is not None:
                server, serving = self.http
                server.should_exit = True
                await serving
            await super().__del__()

        @serve.multiplexed(max_num_models_per_replica=max_models_per_replica)
        async def load(self, model_id: str) -> LoadedModel:
            entry = self.registry.entries[model_id]
            service = await asyncio.get_running_loop().run_in_executor(None, load_service, entry, self.settings)
            self.loaded[model_id] = service
            return LoadedModel(service, lambda name: self.loaded.pop(name, None))

        # ---- jobs forwarded by another replica (RemoteModel), for the model id Serve routed them by --------
        async def service(self) -> ModelService:
            return (await self.load(serve.get_multiplexed_model_id())).service

        async def translate(self, job: TranslationJob) -> TranslationResult:
            return await (await self.service()).translate(job)

        async def generate(self, job: GenerationJob) -> GenerationResult:
            return await (await self.service()).generate(job)

        async def generate_stream(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
            async for event in (await self.service()).generate_events(job):
                yield event

        # ---- health and operations ------------------------------------------------------------------------
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
                service.engine.stop()

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
    """The ModelService interface the app uses, forwarded to the ModelServer replica Serve's multiplexing picks
    for the model. When it picks this very replica, the job is served here instead: a stream through a handle
    back to the replica it came from loses items and hangs (Ray 2.60; between two replicas it does not), and a
    unary call to itself only adds a hop."""

    def __init__(self, handle: DeploymentHandle, name: str, this_replica: str, local):
        self.name, self.handle = name, handle.options(multiplexed_model_id=name)
        self.this_replica, self.local = this_replica, local  # local: async (name) -> ModelService

    async def translate(self, job: TranslationJob) -> TranslationResult:
        return await self._unary("translate", job)

    async def generate(self, job: GenerationJob) -> GenerationResult:
        return await self._unary("generate", job)

    async def _unary(self, method: str, job):
        """`method` of ModelServer (and of ModelService) on the replica Serve picks, or here."""
        async with self._route(method, job) as replica:
            if replica is not None:
                return await self.handle.dispatch(replica, job)
        return await getattr(await self.local(self.name), method)(job)

    async def generate_events(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        async with self._route("generate_stream", job, stream=True) as replica:
            if replica is not None:
                stream = self.handle.dispatch(replica, job)
                try:
                    async for event in stream:
                        yield event
                finally:
                    stream.cancel()
                return
        async for event in (await self.local(self.name)).generate_events(job):
            yield event

    @asynccontextmanager
    async def _route(self, method: str, job, stream: bool = False) -> AsyncIterator[ReplicaSelection | None]:
        """The replica Serve picks for this job, held while the job runs there; None when it is this replica
        (released at once: the caller then serves the job here). Errors come out as an HTTP client sees them."""
        try:
            async with self.handle.options(method_name=method, stream=stream).choose_replica(job) as selection:
                yield None if selection.replica_id == self.this_replica else selection
        except Exception as e:
            raise unwrap(e) from None


class ReplicaModels:
    """ModelProvider for the app inside a ModelServer replica: a model this replica holds serves here; any other
    is forwarded to the replica Serve's multiplexing picks for it."""

    def __init__(self, server):
        self.server, self.registry, self.settings = server, server.registry, server.settings
        self.handle: DeploymentHandle | None = None  # to this deployment, made at the first forwarded request

    async def get(self, name: str | None, source_lang: str | None = None, target_lang: str | None = None):
        name = self.registry.resolve(name, source_lang, target_lang)
        if name in self.server.loaded:
            return await self.local(name)
        if self.handle is None:
            context = serve.get_replica_context()
            self.handle = serve.get_deployment_handle(context.deployment, app_name=context.app_name)
        return RemoteModel(self.handle, name, serve.get_replica_context().replica_id.unique_id, self.local)

    async def local(self, name: str) -> ModelService:
        """The model in this replica, loaded here if need be, through the multiplexer: it keeps the LRU order."""
        return (await self.server.load(name)).service

    def models(self) -> list[ModelInfo]:
        return [model_info(entry, self.settings) for entry in self.registry.entries.values()]

    async def health(self, stale_after_s: float) -> tuple[bool, str]:
        """This replica's engines, answered here: health never queues behind decoding work."""
        return self.server.health(stale_after_s)

    def metrics_text(self) -> bytes:
        """One scrape for every replica process on this node (prometheus-client multiprocess mode)."""
        return metrics.scrape()


def build(settings: Settings, registry: ModelRegistry, replicas: int = 1, num_cpus: float = 1, num_gpus: float = 0,
          health_check_period_s: float = 5):
    """The application: ModelServer replicas (the HTTP app and the engines), with replica counts and resources
    set here (or by a config).

    Serve counts requests, the engine sequences; a request is one sequence at least, so a replica takes the
    requests its engine can hold (batch rows + waiting sequences; beyond them the engine answers 503 at once) plus
    room for health checks, scrapes and refusals, so those never wait behind decoding work; beyond that Serve
    queues as many (a burst briefly waits there for a replica even when replicas have room), then answers 503
    with Retry-After. A relative key store is resolved here, where the application is built (on the head node,
    whose file every replica's counts go to: runtime.cluster_keys)."""
    settings = replace(settings, key_store=str(Path(settings.key_store).resolve()))
    model_server = model_server_class(settings.max_models_per_replica).options(
        num_replicas=replicas,
        max_ongoing_requests=settings.max_batch_rows + settings.max_waiting_sequences + CONTROL_REQUESTS,
        max_queued_requests=settings.max_waiting_sequences + CONTROL_REQUESTS,
        backpressure_config={"status_code": QueueFull.status, "retry_after_s": QueueFull.retry_after_s},
        health_check_period_s=health_check_period_s,
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
    )
    return model_server.bind(settings, registry)


def deploy(app: serve.Application, name: str, route_prefix: str | None, poll_s: float = 0.1) -> DeploymentHandle:
    """serve.run(app, name=..., route_prefix=...), returning once the application runs, as that does, but looking
    every `poll_s` rather than every second. Raises RuntimeError if the deployment fails, with each failed
    deployment's message (a replica's constructor's error) where serve.run gives only the application's.
    → a handle to the application's ingress deployment (ModelServer for build()'s)."""
    serve.run_many([serve.RunTarget(app, name=name, route_prefix=route_prefix)], wait_for_applications_running=False)
    while (status := serve.status().applications[name]).status != "RUNNING":
        if status.status == "DEPLOY_FAILED":
            failed = [f"{deployment}: {d.message}" for deployment, d in status.deployments.items() if d.message]
            raise RuntimeError("; ".join([f"deploying {name} failed: {status.message}", *failed]))
        time.sleep(poll_s)
    return serve.get_app_handle(name)


def build_app(args: dict):
    """`serve run server.runtime.deployment:build_app model=DIR[,DIR...] key=value...`; the other keys are
    Settings fields (max_batch_rows=32, max_models_per_replica=2, device=cuda, ...). Replicas, autoscaling and resources
    come from the Serve config's `deployments:` section (see deploy/serve_config.yaml)."""
    args = dict(args)
    paths = [p for p in str(args.pop("model", "") or "").split(",") if p]
    num_gpus = 1 if torch.cuda.is_available() else 0
    settings = Settings.from_env(**{k: Settings.coerce(k, v) for k, v in args.items()})
    return build(settings, ModelRegistry.from_paths(paths), num_gpus=num_gpus)
