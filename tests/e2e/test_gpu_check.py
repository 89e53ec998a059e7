"""The GPU check's dry run: every step of `python -m loadtests.gpu_check` walked on the CPU with tiny shapes, so
that on a GPU machine only CUDA can fail; its serve step is also the load-test runner's test from end to end. The
dry run (a minute and a half of processes of its own) starts when collection ends (conftest), beside the tests
before this module, rather than holding the suite for that long."""

import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from server_process import free_port

from loadtests.gpu_check import reduced_cpu_format

ROOT = Path(__file__).resolve().parents[2]


def gpu_check(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadtests.gpu_check", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


class DryRun:
    """`gpu_check --dry-run` in a process of its own; `started`: the one conftest started."""

    started: "DryRun | None" = None

    def __init__(self):
        self.out = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        port = free_port()
        while not free_port_at(port + 1):  # two free ports in a row: the locust run's server and bench_serving's
            port = free_port()
        self.port = port
        command = [sys.executable, "-m", "loadtests.gpu_check", "--dry-run", "--out", str(self.out / "run"),
                   "--port", str(port)]
        with open(self.out / "stdout", "w") as stdout, open(self.out / "stderr", "w") as stderr:
            # Its OpenMP threads sleep when idle: spinning ones (the default) beside the tests' own slowed the
            # tests it overlaps about threefold on 2 cores, so that running it alongside gained nothing.
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=stdout, stderr=stderr, text=True,
                                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
                                            start_new_session=True)  # its group: every process it starts

    def finish(self, timeout: float = 600) -> subprocess.CompletedProcess:
        self.process.wait(timeout)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode,
                                           (self.out / "stdout").read_text(), (self.out / "stderr").read_text())

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # finished, its processes with it
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        shutil.rmtree(self.out, ignore_errors=True)


@pytest.fixture(scope="module")
def dry_run():
    run = DryRun.started or DryRun()
    try:
        yield run.finish(), run.out / "run", run.port
    finally:
        run.stop()


def free_port_at(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening(port: int) -> bool:
    """Whether something accepts connections at the port (binding it is no test: the server's side of the load
    run's closed connections keeps it in TIME_WAIT for a minute)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_every_step_passes_on_the_cpu(dry_run):
    done, out, _ = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["dry_run"] is True
    assert [(s["name"], s["status"]) for s in report["steps"]] == [
        ("tests", "passed"), ("invariance", "passed"), ("quality", "passed"), ("bench", "passed"),
        ("serve", "passed")]
    commands = {c["label"]: c for s in report["steps"] for c in s["commands"]}
    reduced = reduced_cpu_format()  # the GPU's half precision stands in as bfloat16, or int8 below AVX-512
    assert set(commands) == {"pytest", "gpu_invariance", "float32 on cpu", f"{reduced} on cpu", "opus-mt-en-de",
                             "nllb-600m", "one-row step", "locust", "bench_serving"}
    # the report carries what each step printed
    assert "needs a CUDA GPU" in commands["pytest"]["stdout"] or "passed" in commands["pytest"]["stdout"]
    assert "| greedy |" in commands[f"{reduced} on cpu"]["stdout"]
    assert f"| demo | {reduced} | fixed | beam 4, n-best | 0 of 3 |" in commands["gpu_invariance"]["stdout"]
    assert "| log-softmax over 58101 (model) | float32 | batch indices that differ [] |" in \
        commands["gpu_invariance"]["stdout"]
    assert f"| opus-mt-en-de | {reduced} | 64 |" in commands["one-row step"]["stdout"]
    assert "| engine loop, in-process | 4 | 1 |" in commands["bench_serving"]["stdout"]
    md = (out / "report.md").read_text()
    assert "| serve | passed |" in md and "## Targets" in md


def test_the_bench_tables_and_targets_come_from_the_measurements(dry_run):
    _, out, _ = dry_run
    report = json.loads((out / "report.json").read_text())
    for shape in ("opus-mt-en-de", "nllb-600m"):
        bench = report["bench"][shape]
        assert bench["tiny"] is True and bench["device"] == "cpu"
        cells = {(c["engine"], c["beams"], c["batch"]): c for c in bench["cells"]}
        assert {(1, 1), (1, 2), (2, 1), (2, 2)} <= {(b, n) for _, b, n in cells}
        # the same random model, greedy, float32: our engine agrees with transformers on every sequence
        assert cells[("ours float32", 1, 2)]["greedy_agrees"] == "2/2"
        assert cells[("ours float32", 1, 2)]["tokens_s"] > 0
        assert cells[("transformers float32", 1, 2)]["x_transformers"] == 1
        assert bench["floor"] and bench["floor"][0]["engine"] == "ours float32"
        assert bench["graphs"] == []  # no CUDA graphs on the CPU
    quality = [t for t in report["targets"] if "exact match" in t["target"]]
    assert len(quality) == 2 and all(t["met"] for t in quality)  # = float32 on the demo, greedy and beam 2
    floors = [t for t in report["targets"] if "floor" in t["target"]]
    assert len(floors) == 2


def test_the_load_run_went_through_the_runner_against_ray_serve(dry_run):
    """The serve step's locust run: `python -m loadtests.run --start-server` started `python -m server` (Ray Serve,
    the default), ran locust headless against it with no failure, wrote every output, and stopped the server."""
    _, out, port = dry_run
    locust = out / "locust"
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "report.html",
                 "chart.png", "locust.json", "server.log"):
        assert (locust / name).stat().st_size > 0, name
    assert "Started Serve" in (locust / "server.log").read_text()
    entries = json.loads((locust / "locust.json").read_text())
    assert sum(e["num_requests"] for e in entries if e["method"] != "SSE") > 0
    assert sum(e["num_failures"] for e in entries) == 0
    with open(locust / "locust_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    names = {e["name"] for e in entries}
    # which translate task a user picks is random (a single text 3 times in 4): a 5-s run may see only one of them
    assert any(name.startswith("/v1/translate") for name in names), names
    assert {"/v1/generate [stream]", "ttft", "/readyz"} <= names, names
    report = json.loads((out / "report.json").read_text())
    runner = next(c for s in report["steps"] for c in s["commands"] if c["label"] == "locust")
    assert "ttft p95" in runner["stdout"]
    assert not listening(port), "the server is still running"


def test_refuses_unknown_steps_and_a_missing_gpu(tmp_path):
    done = gpu_check("--out", str(tmp_path), "--steps", "tests,warp", timeout=120)
    assert done.returncode == 2 and "unknown steps: warp" in done.stderr
    if not torch.cuda.is_available():
        done = gpu_check("--out", str(tmp_path), timeout=120)
        assert done.returncode == 2 and "--dry-run" in done.stderr
