"""`python -m server --no-ray`: the HTTP app and every model in this process, or with `--workers N` in N
processes that share the port, each with its own copy of the models, engine loops and torch threads (the cores
split between them).

Why workers: in one process the event loop and the engine threads share one interpreter lock and leave cores
idle under load (loadtests/README.md, serving path). What is per worker, as per replica under Ray Serve: key rate
limits and quotas, translated files waiting for download, and each model's batch. Metrics are one scrape over
every worker (prometheus-client's multiprocess files). A worker that dies is replaced.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from multiprocessing.synchronize import Event

from fastapi import FastAPI

from .listen import reuseport_socket, uvicorn_server
from ..front import ModelRegistry
from ..metrics import METRICS_DIR_ENV
from ..settings import Settings

log = logging.getLogger(__name__)


def serve(registry: ModelRegistry, settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT; the exit code."""
    names = ", ".join(registry.entries)
    if settings.workers == 1:
        app = local_app(registry, settings, machine_cores())
        print(f"serving {names} at http://{settings.host}:{settings.port}", flush=True)
        uvicorn_server(app, settings).run()
        return 0
    # Before any worker imports prometheus-client: the mode is chosen when it is imported.
    metrics_dir = tempfile.mkdtemp(prefix="s2s-metrics-")
    os.environ[METRICS_DIR_ENV] = metrics_dir
    print(f"serving {names} at http://{settings.host}:{settings.port} from {settings.workers} worker processes",
          flush=True)
    try:
        return Supervisor(registry, settings).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


class Supervisor:
    """Starts the workers, starts a new one for each that dies, and on SIGTERM/SIGINT stops them all (each drains
    its requests). A worker that dies before it ever served stops the server: the next one would fail alike."""

    def __init__(self, registry: ModelRegistry, settings: Settings):
        self.context = multiprocessing.get_context("spawn")
        self.registry, self.settings = registry, settings
        self.stopping = threading.Event()
        self.workers: list[tuple[multiprocessing.Process, Event]] = []

    def start_worker(self) -> tuple[multiprocessing.Process, Event]:
        started = self.context.Event()
        process = self.context.Process(target=run_worker, args=(self.registry, self.settings, started),
                                       name="s2s-worker")
        process.start()
        return process, started

    def run(self) -> int:
        failed = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        self.workers = [self.start_worker() for _ in range(self.settings.workers)]
        while not self.stopping.wait(0.5):
            for i, (process, started) in enumerate(self.workers):
                if process.is_alive():
                    continue
                if not started.is_set():
                    log.error("worker %d exited (%s) before it served; stopping", process.pid, process.exitcode)
                    failed = True
                    self.stopping.set()
                    break
                log.warning("worker %d exited (%s); starting another", process.pid, process.exitcode)
                self.workers[i] = self.start_worker()
        for process, _ in self.workers:
            if process.is_alive():
                process.terminate()  # SIGTERM: the worker drains its requests, as a single server does
        for process, _ in self.workers:
            process.join(self.settings.drain_timeout_s + 10)
            if process.is_alive():
                process.kill()
        return 1 if failed else 0


def run_worker(registry: ModelRegistry, settings: Settings, started: Event) -> None:
    """One worker process on its own socket bound to the shared port: with SO_REUSEPORT the kernel spreads new
    connections over the workers' sockets (on one shared socket, whichever worker woke first took a whole burst)."""
    from .process import name_this_process

    name_this_process("s2s-worker")
    os.setpgrp()  # Ctrl-C reaches the supervisor only, which stops each worker once (a second signal would cut
    # uvicorn's drain short)
    threading.Thread(target=stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    app = local_app(registry, settings, machine_cores() / settings.workers)
    app.router.on_startup.append(started.set)
    uvicorn_server(app, settings).run(sockets=[reuseport_socket(settings.host, settings.port)])


def stop_when_orphaned(parent: int) -> None:
    """A worker whose supervisor died (SIGKILL) drains and exits instead of serving on alone."""
    while os.getppid() == parent:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def local_app(registry: ModelRegistry, settings: Settings, cores: float) -> FastAPI:
    """The app over in-process models, their engines given `cores`; the engines stop when the app shuts down."""
    from ..api import create_app
    from .local import LocalModels
    from .process import set_engine_threads

    set_engine_threads(cores, settings)
    models = LocalModels(settings, registry)
    app = create_app(models, settings)
    app.router.on_shutdown.append(models.close)
    return app


def machine_cores() -> int:
    return len(os.sched_getaffinity(0))
