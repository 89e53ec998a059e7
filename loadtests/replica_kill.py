"""One replica of a `python -m server` (Ray) killed under load, and the time until Serve's replacement runs: what
`python -m loadtests.run --kill-replica-at S` does (loadtests/staged.py calls it inside the locust run, at S).

The replicas are found among the server's own descendants (Ray's raylet, a child of the driver, starts them), never
by name across the machine, where other servers may run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

REPLICA_TITLE = "ServeReplica:"  # Ray titles a replica's process "ray::ServeReplica:<app>:<deployment>"
BUSIEST_OVER_S = 1.0  # the CPU use that picks the replica to kill is measured over this long, just before


@dataclass(frozen=True)
class Kill:
    pid: int  # the replica killed
    at_s: float  # into the run
    replicas_before: int | None  # as /v1/models reported them
    recovered_after_s: float | None  # until the replacement ran (None: not within the wait)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def read(cls, path: Path) -> Kill:
        return cls(**json.loads(path.read_text()))

    def line(self) -> str:
        recovered = "not replaced in time" if self.recovered_after_s is None else \
            f"a replacement ran {self.recovered_after_s:.1f} s later"
        return f"replica pid {self.pid} (of {self.replicas_before}) killed at {self.at_s:.0f} s; {recovered}"


def replica_pids(server_pid: int) -> set[int]:
    found = set()
    for process in psutil.Process(server_pid).children(recursive=True):
        try:
            if REPLICA_TITLE in " ".join(process.cmdline()):
                found.add(process.pid)
        except psutil.Error:  # exited meanwhile
            pass
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and its descendants (a replica's engine processes are its children)."""
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            total += sum(process.cpu_times()[:2])
        except psutil.Error:  # exited meanwhile
            pass
    return total


def busiest(pids: set[int], over_s: float = BUSIEST_OVER_S) -> int:
    """The replica that used the most CPU over `over_s`: one decoding requests (a replica that does not hold the
    model forwards its requests to one that does)."""
    processes = [psutil.Process(pid) for pid in sorted(pids)]
    before = [sum(p.cpu_times()[:2]) for p in processes]
    time.sleep(over_s)
    used = [sum(p.cpu_times()[:2]) - b for p, b in zip(processes, before)]
    return processes[used.index(max(used))].pid


def kill_one_and_wait(server_pid: int, replicas: Callable[[], int | None], run_started: float,
                      timeout_s: float = 120, every_s: float = 0.25) -> Kill:
    """SIGKILL to the busiest replica, BUSIEST_OVER_S from now; returns once a new replica process runs and the
    replica count `replicas()` reports, having dropped, is back where it was (Serve counts a replica running once
    it has started and passed its first health check). `run_started`: the run's start, time.monotonic()."""
    before, count = replica_pids(server_pid), replicas()
    victim = busiest(before)
    os.kill(victim, signal.SIGKILL)
    killed, dropped = time.monotonic(), False
    at_s = killed - run_started
    while time.monotonic() - killed < timeout_s:
        now = replicas()
        dropped = dropped or (now is not None and count is not None and now < count)
        if dropped and now == count and replica_pids(server_pid) - before:
            return Kill(victim, at_s, count, time.monotonic() - killed)
        time.sleep(every_s)
    return Kill(victim, at_s, count, None)
