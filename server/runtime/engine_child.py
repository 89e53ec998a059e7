"""A model's engine in a process of its own, the child's side: loads the weights, runs the model's engine loop fed
from the pipe, and sends each step's outputs and metric observations back in one message (runtime.engine_process
is the parent's side and says what crosses the pipes)."""

from __future__ import annotations

import logging
import pickle
import threading
from functools import partial
from multiprocessing.connection import Connection

from model import AlignmentInput

from ..engine.loop import EngineLoop, start_engine_loop
from ..engine.sequence import Output, Sequence
from ..metrics import EngineStats
from ..settings import Settings
from .process import in_passing_thread, load_weights, name_this_process
from .queued import QueuedCount

log = logging.getLogger(__name__)


def send(conn: Connection, message: tuple, shares_tensors: bool = False) -> None:
    """`message` down a pipe to the other process, whose `recv()` reads it. Pickled plainly: multiprocessing's own
    pickler copies the copyreg table for every message, which took ~2× the time of pickling a submit or a step's
    outputs itself. `shares_tensors` (audio features): multiprocessing's way, which shares a tensor's memory instead
    of copying it."""
    if shares_tensors:
        conn.send(message)
    else:
        conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


class Outbox:
    """What the engine sends back, gathered between sends: a step's outputs go in one message."""

    def __init__(self, conn: Connection):
        self.conn, self.ready = conn, threading.Condition()
        self.outputs: list[tuple[int, Output]] = []
        self.observations: list[tuple] = []  # counters and histograms: each one counts
        self.gauges: dict[tuple, tuple] = {}  # gauges, by metric and labels: only the last value counts
        self.replies: list[tuple] = []
        self.closed = False

    def output(self, id: int, output: Output) -> None:
        with self.ready:
            self.outputs.append((id, output))
            if len(self.outputs) == 1:
                self.ready.notify()

    def observe(self, name: str, labels: tuple[str, ...], method: str, value: float) -> None:
        """A metric observation, sent with the next outputs (or within a quarter second)."""
        with self.ready:
            if method == "set":
                self.gauges[name, labels] = (name, labels, method, value)
            else:
                self.observations.append((name, labels, method, value))

    def reply(self, call: int, result, error: Exception | None) -> None:
        with self.ready:
            self.replies.append(("reply", call, result, error))
            self.ready.notify()

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify()

    def send_until_closed(self, loop: EngineLoop, heartbeat) -> None:
        """The sender thread: sends what gathered and publishes the loop's heartbeat at least every 0.25 s."""
        while True:
            with self.ready:
                if not (self.outputs or self.replies or self.closed):
                    self.ready.wait(0.25)
                outputs, replies = self.outputs, self.replies
                observations = self.observations + list(self.gauges.values())
                self.outputs, self.observations, self.gauges, self.replies = [], [], {}, []
                closed = self.closed
            heartbeat.value = loop.heartbeat if loop.alive else -1
            try:
                if outputs or observations:
                    send(self.conn, ("outputs", outputs, observations))
                for reply in replies:
                    send(self.conn, reply)
            except (OSError, ValueError):
                return  # the server process is gone
            if closed:
                return


def serve_engine(path: str | None, settings: Settings, name: str, threads: int, inbox: Connection,
                 outbox_conn: Connection, queued: QueuedCount, heartbeat) -> None:
    """The engine process: loads the model, then serves the server's messages until it says stop or goes away."""
    import gc
    import signal

    import torch

    from model import keep_freed_memory

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the server stops it
    name_this_process("s2s-engine")
    torch.set_num_threads(threads)
    keep_freed_memory()  # before another thread allocates: then every thread allocates from the main arena
    try:
        bundle = in_passing_thread(partial(load_weights, path, settings))  # on the CPU: the only device here
    except Exception as e:
        outbox_conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    relay = in_passing_thread(partial(Relay, bundle, settings, name, outbox_conn, queued, heartbeat))
    gc.collect()
    gc.freeze()  # the model and the imports live as long as the process: full collections skip them (listen.py)
    relay.run(inbox)


class Relay:
    """The engine process's side of the pipes: the server's messages into the model's engine loop, its outputs
    into the outbox (it serves no network: the server process does)."""

    def __init__(self, bundle, settings: Settings, name: str, outbox_conn: Connection, queued: QueuedCount,
                 heartbeat):
        self.outbox = Outbox(outbox_conn)
        # The server process counts waiting sequences against the limit; here they are only kept in order, and
        # each one that leaves the queue (admitted or cancelled) gives its place back to that count.
        self.engine_loop = start_engine_loop(bundle, settings, EngineStats(name, self.outbox.observe),
                                             max_waiting=None, left_waiting=queued.give_back)
        self.sender = threading.Thread(target=self.outbox.send_until_closed, args=(self.engine_loop, heartbeat),
                                       name="engine-outbox")
        self.sender.start()
        outbox_conn.send(("ready",))

    def run(self, inbox: Connection) -> None:
        """Handle the server's messages until it says stop or goes away, then stop the engine loop."""
        try:
            while self.handle(inbox):
                pass
        except Exception:  # a bug: exit, and the server fails what this engine held and starts another
            log.exception("the engine process failed")
        self.engine_loop.stop()  # after the alignments under way
        self.outbox.close()
        self.sender.join(10)

    def handle(self, inbox: Connection) -> bool:
        """One message; False when it is time to stop (the server said so, or is gone)."""
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            return False
        kind = message[0]
        if kind == "submit":
            added = [Sequence(ids, params, partial(self.deliver, id), id=id, request_id=request_id, stream=stream,
                              arrived_at=arrived_at, features=features)
                     for id, request_id, ids, params, stream, arrived_at, features in message[1]]
            self.engine_loop.add(added)
        elif kind == "cancel":
            self.cancel(message[1])
        elif kind == "align":
            self.engine_loop.engine.beside_decoding(self.align, message[1], message[2])
        return kind != "stop"

    def deliver(self, id: int, output: Output) -> None:
        """The engine thread's delivery of one output."""
        self.outbox.output(id, output)

    def cancel(self, ids: list[int]) -> None:
        with self.engine_loop.lock:  # the scheduler's queues are the engine thread's: read them under its lock
            self.engine_loop.cancel(*(s for s in map(self.engine_loop.scheduler.find, ids) if s is not None))

    def align(self, call: int, inputs: list[AlignmentInput]) -> None:
        try:
            self.outbox.reply(call, self.engine_loop.aligner(inputs), None)
        except Exception as e:
            self.outbox.reply(call, None, e)
