"""Smoke test of the load test tooling: a short headless locust run through `python -m loadtests.run`
against the Ray Serve app (`python -m server`) it starts on the tiny test checkpoint, plus the SLO gate
arithmetic.

    pytest tests/test_loadtest_smoke.py

Locust (gevent) runs in subprocesses only; nothing here imports it.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from pathlib import Path

from loadtests.stats import Entries, RunSummary, Slo

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_smoke_run_through_the_runner(checkpoint, tmp_path):
    port, out = free_port(), tmp_path / "out"
    command = [sys.executable, "-m", "loadtests.run", "--host", f"http://127.0.0.1:{port}", "--users", "4",
               "--spawn-rate", "4", "--duration", "8s", "--out", str(out), "--start-server",
               "--server-args", f"--model {checkpoint} --port {port}",  # the Ray Serve app (python -m server)
               "--locust-args", "--max-new-tokens 16", "--max-p95-ms", "20000", "--max-ttft-p95-ms", "20000"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "report.html",
                 "chart.png", "locust.json", "server.log"):
        assert (out / name).stat().st_size > 0, name
    entries = json.loads((out / "locust.json").read_text())
    assert sum(e["num_requests"] for e in entries if e["method"] != "SSE") > 0
    assert sum(e["num_failures"] for e in entries) == 0
    with open(out / "locust_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    names = {e["name"] for e in entries}
    assert {"/v1/translate", "/v1/generate [stream]", "ttft", "/readyz"} <= names, names
    assert "ttft p95" in result.stdout
    assert not port_open(port), "the server is still running"


def run(requests=100, failures=0, p95=100.0, ttft_p95=50.0) -> RunSummary:
    return RunSummary("base", 4, requests, failures, 10.0, 50.0, p95, 200.0, ttft_p95)


def test_slo_gates():
    slo = Slo(max_failure_ratio=0.01, max_p95_ms=1000, max_ttft_p95_ms=500)
    assert slo.violations(run()) == []
    assert slo.violations(run(failures=2)) == ["failure ratio 2.00% > 1.00%"]
    assert slo.violations(run(p95=1500)) == ["translate p95 1500 ms > 1000 ms"]
    assert slo.violations(run(ttft_p95=600)) == ["ttft p95 600 ms > 500 ms"]
    assert slo.violations(run(ttft_p95=None)) == []  # no streams: that gate has nothing to check
    assert slo.violations(run(requests=0)) == ["no requests completed"]


def test_percentiles_over_merged_entries():
    def entry(times: dict[str, int]) -> dict:
        return {"num_requests": sum(times.values()), "num_failures": 0, "start_time": 0.0,
                "last_request_timestamp": 10.0, "response_times": times}

    merged = Entries.merge([entry({"10": 90}), entry({"500": 9, "900": 1})])
    assert (merged.percentile(0.5), merged.percentile(0.95), merged.percentile(0.995)) == (10.0, 500.0, 900.0)
    assert merged.rate() == 10.0
    assert Entries.merge([]).percentile(0.95) is None
