"""Ray Serve, really started on 127.0.0.1 once per module that asks for it (serve_url; shut down with the module),
and what its tests deploy."""

import os
from pathlib import Path

import pytest
from ray_serve_apps import deployed
from server_process import free_port

from server.runtime.ray_main import PROXY_ENV, local_runtime_env, stop_serve


@pytest.fixture(scope="session")
def metrics_dir(tmp_path_factory) -> Path:
    """PROMETHEUS_MULTIPROC_DIR of every Ray process: each replica writes its samples into files named by pid."""
    return tmp_path_factory.mktemp("metrics")


@pytest.fixture(scope="module")  # shut down with the module: an idle Ray + Serve keeps ~13 % of a core busy
def serve_url(metrics_dir):
    import ray
    from ray import serve

    # Ray's processes send their metrics to the export port every 10 s by default; every second here (the
    # floor), so that the export test waits a second or two. Ray's processes read it from the environment, as
    # Serve's proxies read the server's proxy settings (PROXY_ENV: a replica lost mid-request answers 503).
    interval = "RAY_metrics_report_interval_ms"
    env = {interval: "1000", **PROXY_ENV}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({name: value for name, value in env.items() if saved[name] is None})
    try:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=6,
                 runtime_env=local_runtime_env(str(metrics_dir)), log_to_driver=False)
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    stop_serve()
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_models(checkpoints, tmp_path_factory):
    """A directory of three checkpoints (a registry source): tiny-a, tiny-b, tiny-c."""
    root = tmp_path_factory.mktemp("models")
    for name, source in zip(("tiny-a", "tiny-b", "tiny-c"), checkpoints.values()):
        (root / name).symlink_to(source)
    return root


@pytest.fixture(scope="module")
def main_app(serve_url):
    with deployed("main", [], replicas=2, max_models_per_replica=2) as handle:  # the embedded demo model
        yield f"{serve_url}/main", handle


@pytest.fixture(scope="session")
def slow_checkpoint(tmp_path_factory) -> Path:
    """A wider, deeper random model: seconds per 8-beam sequence of 250 tokens, ten times the tiny one's."""
    from marian_fixtures import build_checkpoint

    return build_checkpoint(tmp_path_factory.mktemp("slow") / "slow", d_model=256, decoder_layers=6)
