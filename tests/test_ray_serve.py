"""Ray Serve, really started once per session on 127.0.0.1: replicas, multiplexing with LRU eviction,
replacement of a replica whose engine fails, metrics across replicas, and a two-node cluster on loopback."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_process import free_port

from server.ray_main import local_runtime_env
from server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = Settings(max_batch_rows=16, max_queued_requests=64, max_new_tokens=64)


@pytest.fixture(scope="session")
def serve_url(tmp_path_factory):
    import ray
    from ray import serve

    metrics_dir = tmp_path_factory.mktemp("metrics")
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=6,
             runtime_env=local_runtime_env(str(metrics_dir)), log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_models(checkpoints, tmp_path_factory):
    """A directory of three checkpoints (a registry source): tiny-a, tiny-b, tiny-c."""
    root = tmp_path_factory.mktemp("models")
    for name, source in zip(("tiny-a", "tiny-b", "tiny-c"), checkpoints.values()):
        (root / name).symlink_to(source)
    return root


@contextlib.contextmanager
def deployed(name: str, paths: list[str], settings: Settings = SETTINGS, **build_kwargs):
    """A Serve application at /name for one test; deleted afterwards so its replicas free their CPUs."""
    from ray import serve

    from server.deployment import build
    from server.registry import ModelRegistry

    app = build(settings, ModelRegistry.from_paths(paths), **build_kwargs)
    serve.run(app, name=name, route_prefix=f"/{name}")
    try:
        yield serve.get_deployment_handle("ModelServer", app_name=name)
    finally:
        serve.delete(name)


def translate(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/translate", json=body, timeout=120)


@pytest.fixture(scope="module")
def main_app(serve_url):
    with deployed("main", [], replicas=2, max_models_per_replica=2) as handle:  # the embedded demo model
        yield f"{serve_url}/main", handle


def test_two_replicas_both_serve(main_app):
    url, handle = main_app
    results = [translate(url, text=f"one hundred and {n}", target_lang="de") for n in ("one", "two", "three")]
    assert all(r.status_code == 200 for r in results), results[0].text
    replicas = set()
    deadline = time.monotonic() + 60
    while len(replicas) < 2 and time.monotonic() < deadline:
        replicas.add(handle.describe.remote().result()["replica"])
    assert len(replicas) == 2
    models = httpx.get(f"{url}/v1/models").json()["models"]
    assert models[0]["id"] == "demo-numbers" and models[0]["languages"] == ["de", "fr", "es", "it"]


def test_streaming_and_metrics_through_serve(main_app):
    url, _ = main_app
    with httpx.stream("POST", f"{url}/v1/generate", json={"text": ">>fr<< twelve", "stream": True},
                      timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]" and '"finish_reason"' in lines[-2]
    text = httpx.get(f"{url}/metrics").text
    assert "s2s_output_tokens_total" in text and "s2s_engine_step_seconds_count" in text
    assert httpx.get(f"{url}/readyz").status_code == 200


def test_metrics_reach_rays_metrics_export_port(main_app):
    """What a multi-node cluster scrapes: every node's metrics export port carries the replicas' s2s metrics."""
    import ray

    url, _ = main_app
    assert translate(url, text="seven", target_lang="it").status_code == 200
    port = ray._private.worker.global_worker.node.metrics_export_port
    wanted = ("ray_s2s_output_tokens_total", "ray_s2s_requests_total")  # from a ModelServer and the Ingress
    deadline, text = time.monotonic() + 90, ""
    while time.monotonic() < deadline and not all(name in text for name in wanted):
        time.sleep(2)  # every process reports its metrics every few seconds
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert all(name in text for name in wanted)


def test_multiplexing_routes_models_and_evicts_least_recently_used(serve_url, tiny_models):
    with deployed("lru", [str(tiny_models)], replicas=1, max_models_per_replica=2) as handle:
        check_lru(f"{serve_url}/lru", handle)


def check_lru(url, handle):
    for name in ("tiny-a", "tiny-b", "tiny-a", "tiny-c"):
        response = translate(url, text="hello world", model=name, max_new_tokens=4)
        assert response.status_code == 200 and response.json()["model"] == name
    assert sorted(handle.describe.remote().result()["models"]) == ["tiny-a", "tiny-c"]  # tiny-b was the LRU
    assert translate(url, text="hello", model="nope").status_code == 404


def test_replica_with_failed_engine_is_replaced(serve_url, tiny_models):
    with deployed("fault", [str(tiny_models / "tiny-a")], replicas=1, health_check_period_s=1) as handle:
        check_replacement(f"{serve_url}/fault", handle)


def check_replacement(url, handle):
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200
    before = handle.describe.remote().result()["replica"]
    handle.stop_engines.remote().result()
    deadline = time.monotonic() + 120
    replaced = None
    while time.monotonic() < deadline:
        try:
            replaced = handle.describe.remote().result(timeout_s=10)["replica"]
        except Exception:
            replaced = None
        if replaced not in (None, before):
            break
        time.sleep(1)
    assert replaced not in (None, before)
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_replica_crash_under_load_fails_fast_and_recovers(serve_url, tiny_models):
    with deployed("crash", [str(tiny_models / "tiny-a")], replicas=2, health_check_period_s=1) as handle:
        check_crash_recovery(f"{serve_url}/crash", handle)


def check_crash_recovery(url, handle):
    pids = set()
    while len(pids) < 2:
        pids.add(handle.describe.remote().result()["pid"])
    outcomes, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            start = time.monotonic()
            try:
                r = translate(url, text=["hello world"] * 4, max_new_tokens=60)
                outcomes.append((r.status_code, time.monotonic() - start, r.text))
            except httpx.HTTPError as e:
                outcomes.append((0, time.monotonic() - start, repr(e)))

    workers = [threading.Thread(target=client) for _ in range(6)]
    for w in workers:
        w.start()
    time.sleep(3)
    killed = next(iter(pids))
    os.kill(killed, signal.SIGKILL)
    time.sleep(6)
    stop.set()
    for w in workers:
        w.join(60)
    failures = [o for o in outcomes if o[0] != 200]
    print(f"{len(outcomes)} requests under load, {len(failures)} failed when a replica was killed")
    assert all(status == 503 and "replica" in text for status, _, text in failures), failures[:3]
    assert all(elapsed < SETTINGS.request_timeout_s for _, elapsed, _ in outcomes)
    deadline, alive = time.monotonic() + 120, set()
    while time.monotonic() < deadline and not (len(alive) == 2 and killed not in alive):
        alive = {handle.describe.remote().result(timeout_s=30)["pid"] for _ in range(10)}  # a replacement starts
    assert len(alive) == 2 and killed not in alive
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_overload_under_serve_gets_503_with_retry_after(serve_url, tiny_models):
    small = Settings(max_batch_rows=2, max_queued_requests=2, max_new_tokens=64)
    with deployed("overload", [str(tiny_models / "tiny-a")], settings=small, replicas=1):
        url = f"{serve_url}/overload"

        async def burst():
            async with httpx.AsyncClient(timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{url}/v1/translate", json={
                    "text": f"hello {i}", "max_new_tokens": 60, "beam_size": 1}) for i in range(30)))

        responses = asyncio.run(burst())
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses
        assert all(r.headers.get("retry-after") for r in responses if r.status_code == 503)
        assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_two_node_cluster_on_loopback_runs_replicas_on_both_nodes(tmp_path):
    script = ROOT / "tests" / "two_node_cluster.py"
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "nodes with replicas: 2" in result.stdout


def test_families_side_by_side_route_by_language_and_share_limits(serve_url, checkpoint, family_checkpoints):
    """Marian, NLLB and mBART-50 under Serve's multiplexing (two models per replica): language pairs route to a
    model that serves them, /v1/models lists every family with limits clamped to each model's positions (the
    same function as in-process), and those limits are exactly what requests may use."""
    from server.registry import ModelRegistry, model_info

    settings = Settings(max_batch_rows=16, max_queued_requests=64, max_new_tokens=200)
    paths = [str(checkpoint), str(family_checkpoints["nllb"]), str(family_checkpoints["mbart50"])]
    with deployed("families", paths, settings=settings, replicas=1, max_models_per_replica=2) as handle:
        url = f"{serve_url}/families"
        cards = {c["id"]: c for c in httpx.get(f"{url}/v1/models").json()["models"]}
        registry = ModelRegistry.from_paths(paths)
        for name, entry in registry.entries.items():
            info = model_info(entry, settings)
            assert cards[name]["limits"]["max_new_tokens"] == info.max_new_tokens
            assert cards[name]["family"] == entry.family
        nllb, mbart = family_checkpoints["nllb"].name, family_checkpoints["mbart50"].name
        assert cards[nllb]["limits"]["max_new_tokens"] == 127  # 128 positions, under the server's 200
        assert cards[checkpoint.name]["limits"]["max_new_tokens"] == 200

        routed = {(s, t): translate(url, text="The frog drinks water.", source_lang=s, target_lang=t,
                                    max_new_tokens=8)
                  for s, t in (("en", "de"), ("en", "es"), ("de", "fr_XX"), ("en", "zh-Hant"), ("fr", "ast"))}
        # The most specific model that serves the pair: Marian (2 pairs), then mBART-50 (52²), then NLLB (202²).
        assert {k: r.json()["model"] for k, r in routed.items()} == {
            ("en", "de"): checkpoint.name, ("en", "es"): mbart, ("de", "fr_XX"): mbart, ("en", "zh-Hant"): nllb,
            ("fr", "ast"): nllb}
        assert translate(url, text="x", model=mbart, target_lang="fr", max_new_tokens=127).status_code == 200
        too_many = translate(url, text="x", model=mbart, target_lang="fr", max_new_tokens=128)
        assert too_many.status_code == 422 and too_many.json()["error"]["limit"] == 127
        unknown = translate(url, text="x", model=nllb, target_lang="xx")
        assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "target_lang"
        assert len(handle.describe.remote().result()["models"]) == 2  # the least recently used was evicted
