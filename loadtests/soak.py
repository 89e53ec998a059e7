"""Soak test: a long mixed locust load against a server it starts, sampling the server's memory (RSS) throughout.

    python -m loadtests.soak [--duration 10m] [--users 16] [--sample-every 10s] [--out runs/soak] \\
        [--server-args "--replicas 2"] [--max-rss-growth 0.10] [--locust-args "--max-new-tokens 16"]

It starts `python -m server <server-args>` (default: Ray mode, the demo model) on a free 127.0.0.1 port in its own
process group, waits for /readyz, runs the mixed users of loadtests/locustfile.py for --duration through the
runner of `python -m loadtests.run`, and stops the server at the end, also on Ctrl-C or SIGTERM: SIGTERM to its
group, SIGKILL after 30 s, then the same to any of its processes outside the group (Ray's workers).

What it measures, every --sample-every seconds (t = 0 when the load starts, plus a last sample after it):
- total_mb: RSS summed over the server's process tree: the started process, all its descendants (with Ray: raylet,
  GCS, Serve controller, proxy, replicas, idle workers...) and anything else left in its session. Pages shared
  between processes (libraries, Ray's object store) count once per process, so this overstates real use; what
  matters is how it changes.
- model_server_mb: the processes whose title contains ServeReplica:<app>:Seq2SeqServer (HTTP app and engines)
  (summed over replicas); empty without Ray.
Steady state starts at the first sample at or after the warm-up, min(60 s, 10% of --duration); growth is
(last sample - that sample) / that sample, for each series.

Files in --out: rss.csv (time_s, total_mb, model_server_mb, processes; written as it goes), rss.png,
server.log and the runner's locust files (locust_stats.csv, locust_stats_history.csv, locust_failures.csv,
locust.json, report.html, chart.png, locust.log).

Exit status: 0 when no request failed and no series grew by more than --max-rss-growth, 1 when one did,
2 when the soak could not be run, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shlex
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import matplotlib
import psutil

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .run import _exit_on_sigterm, duration, glue_values, run_locust, user_count
from .server import served
from .stats import RunSummary

MB = 1024 * 1024
ROLES = {"model_server": re.compile(r"ServeReplica:[^:\s]+:Seq2SeqServer")}
SERIES = (("total", "total_mb"), ("model server", "model_server_mb"))
MAX_WARMUP_S = 60.0


@dataclass(frozen=True)
class Sample:
    time_s: float  # since the load started
    total_mb: float
    model_server_mb: float | None  # None: no such process (no Ray)
    processes: int


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.soak", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=duration, default=duration("10m"), help="of the load, e.g. 45s, 10m, 1h")
    p.add_argument("--users", type=user_count, default=16, help="concurrent locust users")
    p.add_argument("--spawn-rate", type=float, default=4, help="users started per second")
    p.add_argument("--sample-every", type=duration, default=duration("10s"), help="RSS sampling interval")
    p.add_argument("--out", type=Path, default=Path("runs/soak"), help="directory for the reports")
    p.add_argument("--server-args", default="", help="arguments of python -m server (default: Ray, demo model)")
    p.add_argument("--port", type=int, default=0, help="server port on 127.0.0.1 (default: a free one)")
    p.add_argument("--server-ready-timeout", type=float, default=300.0, help="seconds to wait for /readyz")
    p.add_argument("--locust-args", default="", help="more locust arguments, e.g. \"--max-new-tokens 16\"")
    p.add_argument("--max-rss-growth", type=float, default=0.10, help="largest allowed growth of each series")
    args = p.parse_args(glue_values(sys.argv[1:] if argv is None else argv))
    if {"--host", "--port"} & {arg.split("=", 1)[0] for arg in shlex.split(args.server_args)}:
        p.error("the soak serves on 127.0.0.1: give the port with --port, not in --server-args")
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_processes(root_pid: int) -> list[psutil.Process]:
    """The started process, its descendants, and any orphan still in its session (start_group made it a leader)."""
    root = psutil.Process(root_pid)
    found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    for p in psutil.process_iter():
        try:
            if p.pid not in found and os.getsid(p.pid) == root_pid:
                found[p.pid] = p
        except OSError:  # gone, or not ours to ask
            pass
    return list(found.values())


def take_sample(processes: list[psutil.Process], t0: float) -> Sample:
    total, count, roles = 0, 0, dict.fromkeys(ROLES)
    for process in processes:
        try:
            rss, title = process.memory_info().rss, " ".join(process.cmdline())  # Ray sets titles in cmdline
        except psutil.Error:  # exited meanwhile
            continue
        total, count = total + rss, count + 1
        for role, pattern in ROLES.items():
            if pattern.search(title):
                roles[role] = (roles[role] or 0) + rss
    mb = {role: None if rss is None else rss / MB for role, rss in roles.items()}
    return Sample(round(time.monotonic() - t0, 1), total / MB, mb["model_server"], count)


class Sampler:
    """Samples the server's RSS on a fixed schedule in a thread, appending each sample to a CSV file and each
    process it found to `seen` (pid -> process)."""

    def __init__(self, root_pid: int, every_s: float, csv_path: Path, seen: dict[int, psutil.Process]):
        self.root_pid, self.every_s, self.csv_path, self.seen = root_pid, every_s, csv_path, seen
        self.samples: list[Sample] = []
        self.t0 = time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        with open(csv_path, "w", newline="") as f:
            csv.writer(f).writerow(field.name for field in fields(Sample))

    def sample(self) -> None:
        try:
            processes = server_processes(self.root_pid)
        except psutil.Error as e:  # the server itself is gone: locust will have noticed
            print(f"rss: could not sample the server: {e}", flush=True)
            return
        self.seen.update((process.pid, process) for process in processes)
        s = take_sample(processes, self.t0)
        self.samples.append(s)
        with open(self.csv_path, "a", newline="") as f:
            csv.writer(f).writerow("" if v is None else round(v, 1) if isinstance(v, float) else v for v in astuple(s))
        print(f"rss t={s.time_s:.0f}s: total {s.total_mb:.0f} MB in {s.processes} processes, "
              f"model server {_mb(s.model_server_mb)}", flush=True)

    def _loop(self) -> None:
        k = 0
        while not self.stopped.wait(max(0.0, self.t0 + k * self.every_s - time.monotonic())):
            self.sample()
            k += 1


@contextmanager
def sampling(root_pid: int, every_s: float, csv_path: Path, seen: dict[int, psutil.Process]):
    """Samples from now until the block ends, then once more (the end of the load, the server still up)."""
    sampler = Sampler(root_pid, every_s, csv_path, seen)
    sampler.thread.start()
    try:
        yield sampler
    finally:
        sampler.stopped.set()
        sampler.thread.join()
        sampler.sample()


def soak(args: argparse.Namespace) -> tuple[RunSummary, list[Sample]]:
    """Starts the server, loads it while sampling, stops it; the locust summary and the samples."""
    args.host = f"http://127.0.0.1:{args.port or free_port()}"  # run_locust reads host, duration, spawn rate
    server = served(args.host, args.server_args, args.out / "server.log", ready_timeout_s=args.server_ready_timeout)
    seen: dict[int, psutil.Process] = {}
    try:
        with server as process, sampling(process.pid, args.sample_every, args.out / "rss.csv", seen) as sampler:
            run = run_locust(args, args.users, args.out, "soak")
    finally:
        stop_stragglers(list(seen.values()))
    return run, sampler.samples


def stop_stragglers(processes: list[psutil.Process], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, the server's processes that outlived the stop of its process group: Ray's workers
    each lead a process group of their own (they stay in the server's session), so the group signals miss them.
    psutil checks each process's start time, so a reused pid is left alone."""
    alive = [p for p in processes if _running(p)]
    if not alive:
        return
    print(f"stopping {len(alive)} server processes left after its process group: "
          f"{', '.join(str(p.pid) for p in alive)}", flush=True)
    for signal_them in (psutil.Process.terminate, psutil.Process.kill):
        for p in alive:
            try:
                signal_them(p)
            except psutil.Error:
                pass
        alive = psutil.wait_procs(alive, timeout=timeout_s)[1]


def warmup_s(duration_s: float) -> float:
    return min(MAX_WARMUP_S, 0.1 * duration_s)


def steady_start(samples: list[Sample], warmup: float) -> Sample | None:
    return next((s for s in samples if s.time_s >= warmup), None)


def growth(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None or start <= 0 else (end - start) / start


def problems(run: RunSummary, start: Sample | None, end: Sample, max_growth: float) -> list[str]:
    found = [] if run.requests else ["no requests completed"]
    if run.failures:
        found.append(f"{run.failures} failed requests")
    if start is None or start is end:
        found.append("no RSS sample in the steady state before the last one: run longer or sample more often")
        return found
    for label, attr in SERIES:
        g = growth(getattr(start, attr), getattr(end, attr))
        if g is not None and g > max_growth:
            found.append(f"{label} RSS grew {g:.1%} > {max_growth:.1%}")
    return found


def summary(run: RunSummary, start: Sample | None, end: Sample) -> str:
    lines = [f"{'requests':>9} {'failures':>9} {'fail %':>7} {'req/s':>7} {'p95 ms':>7} {'ttft p95 ms':>11}",
             (f"{run.requests:>9} {run.failures:>9} {100 * run.failure_ratio:>7.2f} {run.rps:>7.1f} "
              f"{_ms(run.p95):>7} {_ms(run.ttft_p95):>11}"), "",
             f"{'RSS':<13} {'steady start ' + _at(start):>18} {'end ' + _at(end):>14} {'growth':>8}"]
    for label, attr in SERIES:
        first, last = getattr(start, attr, None), getattr(end, attr)
        g = growth(first, last)
        lines.append(f"{label:<13} {_mb(first):>18} {_mb(last):>14} {'-' if g is None else f'{g:+.1%}':>8}")
    return "\n".join(lines)


def rss_chart(samples: list[Sample], warmup: float, png: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(10, 5))
    x = [s.time_s for s in samples]
    for label, attr in SERIES:
        values = [getattr(s, attr) for s in samples]
        if any(v is not None for v in values):
            ax.plot(x, [math.nan if v is None else v for v in values], "o-", markersize=3, label=label)
    ax.axvline(warmup, color="grey", linestyle="--", label="end of warm-up")
    ax.set_xlabel("seconds since the load started")
    ax.set_ylabel("RSS, MB")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def report(args: argparse.Namespace, run: RunSummary, samples: list[Sample]) -> bool:
    """Draws the chart, prints the summary; whether the soak passed."""
    if not samples:
        print("FAIL: no RSS samples (see server.log)")
        return False
    warmup = warmup_s(args.duration)
    start, end = steady_start(samples, warmup), samples[-1]
    rss_chart(samples, warmup, args.out / "rss.png",
              f"server RSS, {args.users} users for {args.duration} s ({args.server_args or 'Ray, defaults'})")
    print(f"\nsoak: {args.users} users for {args.duration} s against {args.host}, "
          f"server args: {args.server_args or '(defaults: Ray)'}; warm-up {warmup:.0f} s; files in {args.out}")
    print(summary(run, start, end))
    found = problems(run, start, end, args.max_rss_growth)
    print("FAIL: " + "; ".join(found) if found else f"pass (no failures, no RSS growth > {args.max_rss_growth:.0%})")
    return not found


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _at(sample: Sample | None) -> str:
    return "-" if sample is None else f"t={sample.time_s:.0f}s"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # unwinds through the blocks that stop locust and the server
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        run, samples = soak(args)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted (RSS samples so far: {args.out / 'rss.csv'})", file=sys.stderr)
        return 130
    return 0 if report(args, run, samples) else 1


if __name__ == "__main__":
    sys.exit(main())
