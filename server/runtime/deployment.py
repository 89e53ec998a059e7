"""Ray Serve: the application, one deployment, Seq2SeqServer, whose replicas run the FastAPI app beside their engines.

    serve run server.runtime.deployment:build_app model=/models/opus-mt-en-de,/models/opus-mt-en-fr
    python -m server                      # local Ray on 127.0.0.1 with the demo model (see runtime.ray_main)

With `replica_http` (what `python -m server` runs) each replica serves HTTP on host:port itself, on a socket
shared with the node's other replicas through SO_REUSEPORT: no Serve proxy and no hop between processes (a fraction
of the CPU per request, loadtests/README.md). Otherwise Serve's proxy hands each request to a replica, which serves
it the same way. A request for a model this replica does not hold is forwarded (runtime.forwarding) through
Serve's model multiplexing to a replica that holds it or loads it (LRU, at most `max_models_per_replica` per
replica); each model has its own engine, so batches never mix models.

Seq2SeqServer's Serve options are set in `build` only; the request limits among them follow from the settings
(`request_limits`), and the Serve configs under deploy/ write out the same numbers for their args (a test holds
them equal), so `python -m server` and `serve run` queue alike.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator

import torch
import ray
from ray import serve
from ray.serve import metrics as ray_metrics
from ray.serve.handle import DeploymentHandle

from model import Segment, Transcript

from .. import metrics
from ..api import create_app
from ..document_store import DocumentStore
from ..domain import GenerationJob, GenerationResult, SpeechJob, StreamEvent, TranslationJob, TranslationResult
from ..errors import QueueFull
from ..front import HeldModel, ModelRegistry
from ..glossary_store import GlossaryStore
from ..key_store import KeyStore
from ..settings import Settings
from .autoscaling import ReplicaCount, Scaling, autoscaling_config, graceful_shutdown_timeout_s, running_replicas
from .forwarding import ReplicaModels
from .head_store import head_store
from .listen import reuseport_socket, uvicorn_server
from .local import load_service, services_health
from .process import set_engine_threads
from .rows_policy import DEMAND_ROWS

log = logging.getLogger("ray.serve")  # what Serve writes to each replica's log (a logger of our own goes nowhere)
CONTROL_REQUESTS = 64  # a replica's room beyond its engines' rows and queues: /healthz, /metrics, quick refusals


def request_limits(settings: Settings) -> dict[str, int]:
    """Serve's request limits for a Seq2SeqServer replica. Serve counts requests, the engine sequences; a request is
    one sequence at least, so a replica takes the requests its engine can hold (batch rows + waiting sequences;
    beyond them the engine answers 503 at once) plus room for health checks, scrapes and refusals, so those never
    wait behind decoding work; beyond that Serve queues as many as an engine lets wait, plus that room (a burst
    briefly waits there for a replica even when replicas have room), then answers 503 with Retry-After."""
    return {"max_ongoing_requests": settings.max_batch_rows + settings.max_waiting_sequences + CONTROL_REQUESTS,
            "max_queued_requests": settings.max_waiting_sequences + CONTROL_REQUESTS}


class LoadedModel:
    """A model held by Serve's multiplexer; Serve calls __del__ when it evicts the model."""

    def __init__(self, service: HeldModel, on_unload):
        self.service, self.on_unload = service, on_unload

    def __del__(self):
        self.on_unload(self.service.name)
        self.service.close()


@serve.deployment(name="Seq2SeqServer")  # its options: build()
@serve.ingress()
class Seq2SeqServer:
    def __init__(self, settings: Settings, registry: ModelRegistry):
        if settings.device == "auto":  # a GPU only if Ray assigned this replica one (it no longer hides them)
            settings = replace(settings, device="cuda" if ray.get_gpu_ids() else "cpu")
        self.settings, self.registry = settings, registry
        self.http = None  # with replica_http: (uvicorn server, its serving task), started with the app
        if not settings.replica_http:  # a request's replica may be on any node; else each node serves its own
            metrics.enable_ray_export(ray_metrics)
        # Ray sets OMP_NUM_THREADS to the replica's num_cpus: its share of the machine
        set_engine_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()), settings)
        self.loaded: dict[str, HeldModel] = {}
        self.replicas = ReplicaCount(log)  # this deployment's, for /v1/models and the s2s_replicas gauge
        self.draining = False  # set when Serve removes this replica: readiness then says so

        # Serve's multiplexer takes its model count when it wraps the loader: here, where the settings are known.
        # It wraps a function (it keeps its LRU as an attribute of what it wraps, which a bound method refuses).
        async def load(model_id: str) -> LoadedModel:
            return await self.load_model(model_id)

        self.load = serve.multiplexed(max_num_models_per_replica=settings.max_models_per_replica)(load)

    def __serve_build_asgi_app__(self):
        keys, documents = self.settings.key_store, str(self.settings.documents_path)
        app = create_app(ReplicaModels(self), self.settings, head_store(KeyStore, keys),
                         head_store(GlossaryStore, keys), head_store(DocumentStore, documents))
        if self.settings.replica_http:  # Serve runs the app's lifespan; this server only serves requests
            server = uvicorn_server(app, self.settings, lifespan="off")
            sock = reuseport_socket(self.settings.host, self.settings.port)
            self.http = server, asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        # started here, where the replica's event loop runs
        self.following = asyncio.get_running_loop().create_task(self.follow_replicas())
        return app

    async def follow_replicas(self, every_s: float = 1.0) -> None:
        """Reads the deployment's replica count from Serve's controller every `every_s` while this replica runs."""
        context = serve.get_replica_context()
        while True:
            try:
                # at least this one: a replica serves before the controller has marked it running
                count = max(1, await asyncio.to_thread(running_replicas, context.app_name, context.deployment))
            except Exception as e:  # the controller restarting: the count stays as last read
                log.debug("replica count unavailable: %s", e)
            else:
                if self.replicas.update(count):
                    metrics.REPLICAS.labels(context.app_name).set(count)
            await asyncio.sleep(every_s)

    async def __del__(self):
        """Serve's graceful shutdown: this replica's HTTP server stops accepting and drains, then the app shuts
        down. Serve's routers have stopped sending it requests, and with its proxy, Serve waited for the ones it
        had (up to graceful_shutdown_timeout_s)."""
        self.draining = True
        if getattr(self, "following", None) is not None:
            self.following.cancel()
        if getattr(self, "http", None) is not None:
            server, serving = self.http
            server.should_exit = True
            await serving
        await super().__del__()

    async def load_model(self, model_id: str) -> LoadedModel:
        """Loads a model for the multiplexer (call `load`: it keeps the LRU order and evicts)."""
        entry = self.registry.entries[model_id]
        service = await asyncio.get_running_loop().run_in_executor(None, load_service, entry, self.settings)
        self.loaded[model_id] = service
        return LoadedModel(service, lambda name: self.loaded.pop(name, None))

    # ---- jobs forwarded by another replica (RemoteModel), for the model id Serve routed them by ------------
    async def service(self) -> HeldModel:
        return (await self.load(serve.get_multiplexed_model_id())).service

    async def translate(self, job: TranslationJob) -> TranslationResult:
        return await (await self.service()).translate(job)

    async def generate(self, job: GenerationJob) -> GenerationResult:
        return await (await self.service()).generate(job)

    async def generate_stream(self, job: GenerationJob) -> AsyncIterator[StreamEvent]:
        async for event in (await self.service()).generate_events(job):
            yield event

    async def transcribe_stream(self, job: SpeechJob) -> AsyncIterator[Segment | Transcript]:
        async for event in (await self.service()).transcribe_events(job):
            yield event

    # ---- health and operations ----------------------------------------------------------------------------
    def health(self, stale_after_s: float) -> tuple[bool, str]:
        if self.draining:
            return False, "draining: this replica is being removed and finishes the requests it has"
        return services_health(list(self.loaded.values()), stale_after_s)

    def record_autoscaling_stats(self) -> dict[str, int]:
        """Serve's hook for custom autoscaling metrics, called every second (runtime.autoscaling): the rows this
        replica's engines hold and wait for, summed over its models (their engines share the replica's cores)."""
        return {DEMAND_ROWS: sum(service.engine.demand_rows for service in list(self.loaded.values()))}

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
        """Which replica and node this is, the models it holds (most recently loaded last) and how many HTTP
        requests it has answered (with replica_http, the kernel spreads connections: this shows where they went)."""
        return {"replica": serve.get_replica_context().replica_id.unique_id, "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(), "models": list(self.loaded),
                "requests": metrics.process_count(metrics.REQUESTS)}


def build(settings: Settings, registry: ModelRegistry, replicas: int = 1, num_cpus: float = 1, num_gpus: float = 0,
          health_check_period_s: float = 5, scaling: Scaling | None = None):
    """The application: Seq2SeqServer replicas (the HTTP app and the engines), with every Serve option of theirs set
    here (a Serve config's `deployments:` section may override them): `replicas` of them, or with `scaling` as
    many as the load asks for (runtime.autoscaling). A relative key store is resolved here, where
    the application is built (on the head node, whose file every replica's counts go to: runtime.head_store)."""
    settings = replace(settings, key_store=str(Path(settings.key_store).resolve()))
    seq2seq_server = Seq2SeqServer.options(
        **({"autoscaling_config": autoscaling_config(settings, scaling)} if scaling else {"num_replicas": replicas}),
        **request_limits(settings),
        backpressure_config={"status_code": QueueFull.status, "retry_after_s": QueueFull.retry_after_s},
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=10,
        # Serve's graceful shutdown sleeps one wait loop before it first looks for ongoing requests (2 s by
        # default), so every stop, redeploy or replica replacement paid 2 s; __del__ drains this replica's own
        # HTTP server.
        graceful_shutdown_wait_loop_s=0.25,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s(settings),
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
    )
    return seq2seq_server.bind(settings, registry)


def deploy(app: serve.Application, name: str, route_prefix: str | None, poll_s: float = 0.1) -> DeploymentHandle:
    """serve.run(app, name=..., route_prefix=...), returning once the application runs, as that does, but looking
    every `poll_s` rather than every second. Raises RuntimeError if the deployment fails, with each failed
    deployment's message (a replica's constructor's error) where serve.run gives only the application's.
    → a handle to the application's ingress deployment (Seq2SeqServer for build()'s)."""
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
