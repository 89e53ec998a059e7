"""The HTTP side's CPU per request against its floor: the same closed-loop load (`loadtests.http_load`, single-text
/v1/translate bodies of the demo texts) on a bare ASGI app and on a minimal FastAPI route, each alone under the same
uvicorn (httptools, uvloop), and on `python -m server --no-ray` (its HTTP process; the engine process apart).

    python -m loadtests.bench_http_floor [--requests 2000] [--clients 32] [--rounds 2]

The three run at once on three ports and take turns, `rounds` times (this VM's speed drifts within minutes). The
floors answer in /v1/translate's shape (the text sent back), so the load generator reads every answer alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from .bench_batching import demo_texts
from .bench_serving import process_name, run_http
from .server import served, start_group, stop_group, wait_ready


def answer(text: str) -> bytes:
    return json.dumps({"model": "floor", "translations": [{"text": text}]}).encode()


async def bare_app(scope, receive, send) -> None:
    """/v1/translate's shape with no framework: the body read and parsed, the answer written (any GET: 200)."""
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    payload = answer(json.loads(body)["text"]) if scope["method"] == "POST" else b"{}"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


class Body(BaseModel):
    text: str
    source_lang: str | None = None
    target_lang: str | None = None


def fastapi_app():
    """A FastAPI route with a pydantic body and a JSON answer, nothing else (uvicorn --factory)."""
    from fastapi import FastAPI, Response

    app = FastAPI()

    @app.post("/v1/translate")
    async def translate(body: Body) -> Response:
        return Response(answer(body.text), media_type="application/json")

    @app.get("/readyz")
    async def ready() -> dict:
        return {}

    return app


@contextlib.contextmanager
def floor(url: str, app: str, log: Path):
    port = url.rsplit(":", 1)[1]
    command = [sys.executable, "-m", "uvicorn", f"loadtests.bench_http_floor:{app}", "--host", "127.0.0.1",
               "--port", port, "--no-access-log", "--log-level", "warning", "--http", "httptools", "--loop", "uvloop"]
    process = start_group(command + (["--factory"] if app == "fastapi_app" else []), log)
    try:
        wait_ready(url, process, log, 60)
        yield process
    finally:
        stop_group(process, 10)


def load(url: str, pid: int, texts: list[tuple[str, str]], clients: int) -> tuple[float, float, float]:
    """(requests/s, CPU ms per request of process `pid` alone, p50 ms)."""
    result = run_http(url, pid, texts, clients, 1, url)
    return result.texts_s, result.cpu_ms.get(process_name(pid), 0.0), statistics.median(result.latencies) * 1000


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_http_floor", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--port", type=int, default=8041, help="the first of three")
    args = p.parse_args(argv)
    texts = demo_texts(args.requests, 7)
    urls = [f"http://127.0.0.1:{args.port + i}" for i in range(3)]
    names = ["bare ASGI app", "FastAPI route, pydantic body", "python -m server --no-ray (HTTP process)"]
    cells: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as stack:
        processes = [stack.enter_context(floor(urls[0], "bare_app", Path(logs) / "bare.log")),
                     stack.enter_context(floor(urls[1], "fastapi_app", Path(logs) / "fastapi.log")),
                     stack.enter_context(served(urls[2], "--no-ray", Path(logs) / "server.log"))]
        for url, process in zip(urls, processes):  # warm-up: a server's first requests load and trace
            load(url, process.pid, texts[:200], args.clients)
        for _ in range(args.rounds):
            for name, url, process in zip(names, urls, processes):
                cells[name].append(load(url, process.pid, texts, args.clients))
    print(f"\n{args.requests} single-text requests from {args.clients} closed-loop clients, {args.rounds} rounds "
          f"taking turns (values in round order)\n")
    print("| app | requests/s | CPU ms per request | p50 ms |")
    print("|---|---|---|---|")
    for name, runs in cells.items():
        print(f"| {name} | " + " | ".join(", ".join(f"{run[i]:.{digits}f}" for run in runs)
                                          for i, digits in ((0, 0), (1, 3), (2, 1))) + " |")


if __name__ == "__main__":
    main()
