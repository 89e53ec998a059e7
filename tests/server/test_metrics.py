"""Metrics that must stay true across models and processes: queue gauges per model, and live gauges of a process
that died without saying so (a killed replica) leaving the multiprocess scrape."""

import subprocess
import sys
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from server_process import Scrape

from server.metrics import EngineStats, reap_dead_processes

ROOT = Path(__file__).resolve().parents[2]


def test_queue_gauges_are_per_model():
    a, b = EngineStats("model-a"), EngineStats("model-b")
    a.queues(waiting=3, running=1, rows_used=4)
    b.queues(waiting=0, running=1, rows_used=2)
    a.queues(waiting=2, running=1, rows_used=4)  # one model's loop does not overwrite the other's
    scrape = Scrape(generate_latest(REGISTRY).decode())
    assert scrape.get("s2s_kv_cache_rows_used", model="model-a") == 4
    assert scrape.get("s2s_kv_cache_rows_used", model="model-b") == 2
    assert scrape.get("s2s_waiting_sequences", model="model-a") == 2
    assert scrape.get("s2s_running_sequences", model="model-a") + scrape.get("s2s_running_sequences",
                                                                            model="model-b") == 2


def test_a_dead_processes_live_gauges_leave_the_scrape(tmp_path):
    """A replica process that sets its gauges and then dies (SIGKILL: no cleanup) must not count any more."""
    script = ("from server.metrics import EngineStats; EngineStats('m').queues(waiting=63, running=1, rows_used=8)")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True)

    def scrape() -> Scrape:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
        return Scrape(generate_latest(registry).decode())

    assert scrape().get("s2s_waiting_sequences") == 63  # what a scrape showed before: the dead process's value
    reap_dead_processes(str(tmp_path))
    after = scrape()
    assert after.get("s2s_waiting_sequences") == after.get("s2s_kv_cache_rows_used") == 0
