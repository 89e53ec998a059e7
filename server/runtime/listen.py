"""The HTTP server a process runs itself: uvicorn over the app, on a socket other processes may share.

Used by `--no-ray --workers N` (worker processes on one port) and by Ray Serve replicas that serve HTTP
themselves (`replica_http`): with SO_REUSEPORT every process binds its own socket to the same address and the
kernel spreads new connections over them (on one shared socket, whichever process woke first took a burst).
"""

from __future__ import annotations

import gc
import socket

from fastapi import FastAPI

from ..settings import Settings
from .connections import AnswerCutRequests, ConnectionAgeLimit


def reuseport_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def ensure_free(host: str, port: int) -> None:
    """Raise OSError if something listens on host:port already. Processes that share a port through SO_REUSEPORT
    would otherwise share it with a server started earlier by the same user, without a word."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        probe.bind((host, port))


def uvicorn_server(app: FastAPI, settings: Settings, lifespan: str = "auto"):
    """On should_exit (SIGTERM/Ctrl-C in a main thread) it stops accepting connections and lets in-flight
    requests finish, up to drain_timeout_s; connections age out and cut requests answer 503 (runtime.connections).
    What the process built until now is frozen out of the collector's sight (gc.freeze): it lives as long as the
    process, and each full collection of the objects of the imports and the app stopped the event loop for a tenth
    of a second or so."""
    import uvicorn

    gc.collect()
    gc.freeze()

    served = AnswerCutRequests(ConnectionAgeLimit(app), draining=lambda: server.should_exit)
    config = uvicorn.Config(served, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=settings.drain_timeout_s, lifespan=lifespan)
    server = uvicorn.Server(config)
    return server
