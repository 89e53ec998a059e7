"""Serve applications for the Ray Serve tests (tests/e2e/test_ray_serve*.py): deployed for one test and deleted
after it, reached through Serve's proxy or from the replicas themselves; what a replica's process measured."""

import contextlib
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from server_process import Scrape, free_port

from server.settings import Settings

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_waiting_sequences=64, max_new_tokens=64)


@contextlib.contextmanager
def deployed(name: str, paths: list[str], settings: Settings = SETTINGS, **build_kwargs):
    """A Serve application at /name for one test; deleted afterwards so its replicas free their CPUs."""
    from ray import serve

    from server.front.registry import ModelRegistry
    from server.runtime.deployment import build, deploy

    if "max_models_per_replica" in build_kwargs:  # a setting
        settings = replace(settings, max_models_per_replica=build_kwargs.pop("max_models_per_replica"))
    handle = deploy(build(settings, ModelRegistry.from_paths(paths), **build_kwargs), name, route_prefix=f"/{name}")
    try:
        yield handle
    finally:
        serve.delete(name)


@contextlib.contextmanager
def deployed_at(serve_url: str, ingress: str, name: str, paths: list[str], settings: Settings = SETTINGS,
                **build_kwargs):
    """deployed(), reached through Serve's proxy (ingress "serve-proxy") or served by its replicas on a free port
    ("replica-http"); yields the application's URL and a handle to its replicas."""
    if ingress == "replica-http":
        settings = replace(settings, replica_http=True, port=free_port())
    with deployed(name, paths, settings, **build_kwargs) as handle:
        yield (f"http://127.0.0.1:{settings.port}" if settings.replica_http else f"{serve_url}/{name}"), handle


INGRESSES = pytest.mark.parametrize("ingress", ["serve-proxy", "replica-http"])


def translate(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/translate", json=body, timeout=120)


def replica_pids(handle, count: int) -> set[int]:
    """The process ids of an application's `count` replicas (Serve routes each call to one of them)."""
    pids = set()
    while len(pids) < count:
        pids.add(handle.describe.remote().result()["pid"])
    return pids


def process_scrape(metrics_dir: Path, pid: int) -> Scrape:
    """The samples one process wrote into the multiprocess directory (one replica, not the node's sum)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    files = [str(f) for f in metrics_dir.glob(f"*_{pid}.db")]

    class OneProcess:
        def collect(self):
            return MultiProcessCollector.merge(files, accumulate=True)

    registry = CollectorRegistry()
    registry.register(OneProcess())
    return Scrape(generate_latest(registry).decode())
