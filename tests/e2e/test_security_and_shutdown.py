"""API keys on /v1 routes, keys never logged, and graceful shutdown that drains in-flight requests."""

import ctypes
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from server_process import Scrape, eventually, free_port, running_server

from server.api import create_app
from server.runtime.local import LocalModels
from server.front.registry import ModelRegistry
from server.settings import Settings

KEY = "sk-test-5f1c9d"
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}  # the syscall that signals one thread of a process


@pytest.fixture(scope="module")
def client(checkpoint):
    settings = Settings(dtype="float32", api_keys=(KEY,), max_new_tokens=20)
    models = LocalModels(settings, ModelRegistry.from_paths([str(checkpoint)]))
    with TestClient(create_app(models, settings)) as c:
        yield c
    models.close()


def test_v1_routes_need_a_valid_key(client):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = client.post("/v1/translate", json={"text": "hello"}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["field"] == "authorization"
    assert client.get("/v1/models").status_code == 401
    ok = client.post("/v1/translate", json={"text": "hello"}, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200


def test_health_routes_stay_open(client):
    for route in ("/healthz", "/readyz", "/metrics"):
        assert client.get(route).status_code == 200


def test_keys_are_never_logged(client, caplog):
    with caplog.at_level(logging.DEBUG):
        client.post("/v1/translate", json={"text": "hello"}, headers={"Authorization": f"Bearer {KEY}"})
        client.post("/v1/translate", json={"text": "hello"}, headers={"Authorization": "Bearer leaked-guess"})
    assert KEY not in caplog.text and "leaked-guess" not in caplog.text


def long_request_decoding(url: str) -> tuple[threading.Thread, dict]:
    """A translation of seconds (8 texts of 4 beams, 4 batch rows) sent from a thread, once it decodes →
    (the thread, {"response": its response} once it has one)."""
    result = {}

    def send():
        body = {"text": ["hello world"] * 8, "beam_size": 4, "max_new_tokens": 250}
        result["response"] = httpx.post(f"{url}/v1/translate", json=body, timeout=120)

    worker = threading.Thread(target=send)
    worker.start()
    assert eventually(lambda: Scrape.of(url).get("s2s_running_sequences") > 0, timeout=30), \
        "the request never started decoding"
    return worker, result


def refusing(url: str) -> bool:
    address = urlsplit(url)
    try:
        socket.create_connection((address.hostname, address.port), timeout=1).close()
        return False
    except OSError:
        return True


def test_sigterm_drains_in_flight_requests_then_exits(checkpoint):
    with running_server("--no-ray", "--model", str(checkpoint), "--max-batch-rows", "4") as server:
        worker, result = long_request_decoding(server.url)
        server.proc.send_signal(signal.SIGTERM)
        assert eventually(lambda: refusing(server.url), timeout=10), "still accepting connections after SIGTERM"
        assert "response" not in result  # the request is still in flight
        with pytest.raises(httpx.HTTPError):  # no longer admitting
            httpx.post(f"{server.url}/v1/translate", json={"text": "late"}, timeout=5)
        worker.join(120)
        assert result["response"].status_code == 200
        assert len(result["response"].json()["translations"]) == 8
        assert server.proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after draining


def test_a_stuck_engine_step_fails_readiness_then_health(checkpoint):
    settings = Settings(dtype="float32", ready_stale_s=0.3, health_stale_s=0.8, max_new_tokens=8,
                        engine_process=False)  # a step
    # of this process's engine loop is made to hang
    models = LocalModels(settings, ModelRegistry.from_paths([str(checkpoint)]))
    service = models.services[models.registry.resolve(None)]
    entered, release = threading.Event(), threading.Event()
    execute = service.engine.engine.execute

    def stuck(plan):
        entered.set()
        release.wait(30)  # a step that does not return, as a hung kernel would
        return execute(plan)

    service.engine.engine.execute = stuck
    try:
        with TestClient(create_app(models, settings)) as c:
            assert c.get("/readyz").status_code == 200
            worker = threading.Thread(target=lambda: c.post("/v1/translate", json={"text": "hello"}))
            worker.start()
            assert entered.wait(10), "the engine never took a step"
            # The thresholds are the behaviour under test: poll until each route fails, then check when it did,
            # against the loop's last sign of progress (a stuck step leaves it where it was).
            last_progress = service.engine.heartbeat
            assert eventually(lambda: c.get("/readyz").status_code == 503, timeout=10)
            assert time.monotonic() - last_progress >= settings.ready_stale_s
            assert c.get("/healthz").status_code == 200  # not yet: health waits for health_stale_s
            assert eventually(lambda: c.get("/healthz").status_code == 503, timeout=10)
            assert time.monotonic() - last_progress >= settings.health_stale_s
            release.set()
            worker.join(30)
            assert eventually(lambda: c.get("/readyz").status_code == 200 and c.get("/healthz").status_code == 200,
                              timeout=10)
    finally:
        release.set()
        models.close()


def test_sigterm_stops_the_ray_server_whichever_thread_it_lands_on(tmp_path, checkpoint):
    """`python -m server` (Ray Serve, the default) exits by itself on SIGTERM, also when the signal lands on another
    of its threads than the main one (Ray's threads do not block signals): its replica first finishes the request in
    flight, then Serve and Ray shut down, and nothing in the stop's output reads as an error."""
    from loadtests.server import start_group, stop_group, wait_exited, wait_ready

    port, log = free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    process = start_group([sys.executable, "-m", "server", "--host", "127.0.0.1", "--port", str(port),
                           "--key-store", str(tmp_path / "keys.sqlite"), "--model", str(checkpoint),
                           "--max-batch-rows", "4"], log)
    try:
        wait_ready(url, process, log, timeout_s=120)
        worker, result = long_request_decoding(url)
        thread = next(int(t) for t in os.listdir(f"/proc/{process.pid}/task") if int(t) != process.pid)
        libc = ctypes.CDLL(None, use_errno=True)  # to that thread, not the main one:
        assert libc.syscall(SYS_TGKILL[os.uname().machine], process.pid, thread, signal.SIGTERM) == 0
        assert eventually(lambda: refusing(url), timeout=30), "the replica still accepts connections after SIGTERM"
        assert "response" not in result  # the replica drains with the request in flight
        assert wait_exited(process, 60), "still running 60 s after SIGTERM:\n" + log.read_text()[-3000:]
        worker.join(60)
        assert result["response"].status_code == 200 and len(result["response"].json()["translations"]) == 8
        output = log.read_text()
        assert process.wait() == 0 and "shutting down" in output
        stop = output.split("shutting down", 1)[1]
        # Ray prints its own errors as "(raylet) Task ... failed", its loggers' at level ERROR
        assert not re.findall(r".*(?:\bERROR\b|Traceback|failed).*", stop), stop
    finally:
        stop_group(process, timeout_s=5)
