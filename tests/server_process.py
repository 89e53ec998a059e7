"""Start `python -m server` in a subprocess on a free loopback port and stop it afterwards; or serve the app
in this process through Starlette's TestClient (in_process_client)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def in_process_client(settings, paths: list[str] | None = None, engines_here: bool = True):
    """The FastAPI app over in-process models (the demo model when `paths` is None), through a TestClient; the
    models' engine loops stop afterwards. `engines_here`: their engines in this process too, not each in a process
    of its own (a spawned engine costs an app seconds to start; that both answer alike is
    e2e/test_engine_process.py's, and every real server process runs them apart); False: as `settings` say."""
    from fastapi.testclient import TestClient

    from server.api import create_app
    from server.runtime.local import LocalModels
    from server.front.registry import ModelRegistry

    if engines_here:
        settings = replace(settings, engine_process=False)
    models = LocalModels(settings, ModelRegistry.from_paths(paths))
    try:
        with TestClient(create_app(models, settings)) as client:
            yield client
    finally:
        models.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen


@contextlib.contextmanager
def running_server(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None):
    """A server with a key store of its own, unless SERVER_KEY_STORE names one (a test sharing it between two);
    `env`: more environment variables for it (SERVER_API_KEYS, ...)."""
    port = free_port()
    cmd = [sys.executable, "-m", "server", "--host", "127.0.0.1", "--port", str(port), *args]
    store = tempfile.TemporaryDirectory()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={"SERVER_KEY_STORE": f"{store.name}/keys.sqlite", **os.environ, **(env or {}),
                                 "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {timeout} s")
            time.sleep(0.2)
        yield Server(url, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        store.cleanup()


def within_one_minute(needed_s: float = 15.0) -> None:
    """Wait for a fresh clock minute when this one has less than `needed_s` left: rate limits count per clock
    minute, and a burst that straddles two would be allowed twice."""
    left = 60 - time.time() % 60
    if left < needed_s:
        time.sleep(left + 0.1)


def eventually(condition, timeout: float = 10.0, interval: float = 0.02):
    """Poll `condition()` until it returns something truthy or `timeout` seconds pass; return its last value
    (the caller asserts on it, so a condition that never holds fails with the value it last had)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


class Scrape:
    """One Prometheus text page, parsed (prometheus_client's own parser): sample values by name and labels."""

    def __init__(self, text: str):
        from prometheus_client.parser import text_string_to_metric_families

        self.samples = [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
                        for s in family.samples]

    @classmethod
    def of(cls, url: str) -> "Scrape":
        response = httpx.get(url + "/metrics", timeout=30)
        assert response.status_code == 200, response.text
        return cls(response.text)

    def get(self, name: str, **labels) -> float:
        """The sum of the samples called `name` whose labels include `labels` (0 when there are none)."""
        return sum(value for n, have, value in self.samples
                   if n == name and all(have.get(k) == str(v) for k, v in labels.items()))

    def buckets(self, name: str, **labels) -> dict[float, float]:
        """A histogram's cumulative buckets, upper bound → count (summed over the other labels)."""
        out: dict[float, float] = {}
        for n, have, value in self.samples:
            if n == name + "_bucket" and all(have.get(k) == str(v) for k, v in labels.items()):
                out[float(have["le"])] = out.get(float(have["le"]), 0.0) + value
        return out

    def delta(self, before: "Scrape", name: str, **labels) -> float:
        return self.get(name, **labels) - before.get(name, **labels)


def send_and_keep_open(url: str, path: str, body: dict) -> socket.socket:
    """POST `body` to url + path on a raw connection and return it unread: closing it is a client hanging up."""
    address = urlsplit(url)
    payload = json.dumps(body).encode()
    conn = socket.create_connection((address.hostname, address.port))
    conn.sendall(f"POST {address.path}{path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return conn
