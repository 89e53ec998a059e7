"""Every Prometheus metric of the server, created here and only here.

Each metric is a prometheus-client metric (scraped from /metrics; in Ray Serve the node's replicas are summed
through multiprocess files) and, once a Serve replica calls `enable_ray_export()` from its __init__, also a
`ray.serve.metrics` metric of the same name on Ray's metrics export port of its node, for multi-node
clusters (exported as ray_<name>, tagged with deployment and replica).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Callable

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

# In multiprocess mode (Ray Serve replicas, --no-ray workers) every process writes its samples into this directory.
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_making = threading.Lock()  # Mirrored.prom's


class Mirrored:
    """A prometheus-client metric that also records to Ray's metrics export after enable_ray_export()."""

    def __init__(self, kind, name: str, doc: str, labels: tuple[str, ...] = (), **kwargs):
        self.kind, self.name, self.doc, self.label_names, self.kwargs = kind, name, doc, labels, kwargs
        self._prom = None
        self.ray = None

    @property
    def prom(self):
        """The prometheus-client metric, made on first use rather than at import: in multiprocess mode making it
        writes a file into METRICS_DIR_ENV's directory, which is made then (a Serve config under deploy/ names one
        that no process has made)."""
        if self._prom is None:
            with _making:  # the engine thread and the event loop may both record a metric first
                if self._prom is None:
                    if os.environ.get(METRICS_DIR_ENV):
                        os.makedirs(os.environ[METRICS_DIR_ENV], exist_ok=True)
                    self._prom = self.kind(self.name, self.doc, self.label_names, **self.kwargs)
        return self._prom

    def export_to_ray(self, ray_metrics) -> None:
        ray_kind = getattr(ray_metrics, self.kind.__name__)
        extra = {"boundaries": list(self.kwargs["buckets"])} if self.kind is Histogram else {}
        self.ray = ray_kind(self.name, description=self.doc, tag_keys=self.label_names, **extra)

    def labels(self, *values: str) -> "Labelled":
        return Labelled(self, values)

    def inc(self, amount: float = 1) -> None:
        self._record("inc", amount, self.prom, {})

    def observe(self, value: float) -> None:
        self._record("observe", value, self.prom, {})

    def set(self, value: float) -> None:
        self._record("set", value, self.prom, {})

    def _record(self, method: str, value: float, prom_metric, tags: dict[str, str]) -> None:
        getattr(prom_metric, method)(value)
        if self.ray is not None:
            getattr(self.ray, method)(value, tags=tags or None)


class Labelled:
    def __init__(self, metric: Mirrored, values: tuple[str, ...]):
        self.metric, self.child = metric, metric.prom.labels(*values)
        self.tags = dict(zip(metric.label_names, values))

    def inc(self, amount: float = 1) -> None:
        self._record("inc", amount)

    def observe(self, value: float) -> None:
        self._record("observe", value)

    def set(self, value: float) -> None:
        self._record("set", value)

    def _record(self, method: str, value: float) -> None:
        self.metric._record(method, value, self.child, self.tags)


REQUESTS = Mirrored(Counter, "s2s_requests_total", "HTTP requests by route and status code", ("route", "status"))
REQUEST_LATENCY = Mirrored(Histogram, "s2s_request_latency_seconds", "HTTP request latency", ("route",),
                           buckets=LATENCY_BUCKETS)
QUEUE_WAIT = Mirrored(Histogram, "s2s_queue_wait_seconds", "Time a sequence waited before joining the batch",
                      buckets=LATENCY_BUCKETS)
TIME_TO_FIRST_TOKEN = Mirrored(Histogram, "s2s_time_to_first_token_seconds", "Arrival to first generated token",
                               buckets=LATENCY_BUCKETS)
TIME_PER_OUTPUT_TOKEN = Mirrored(Histogram, "s2s_time_per_output_token_seconds",
                                 "Decoding time per token after the first", buckets=STEP_BUCKETS)
INPUT_TOKENS = Mirrored(Counter, "s2s_input_tokens_total", "Source tokens of finished sequences")
OUTPUT_TOKENS = Mirrored(Counter, "s2s_output_tokens_total",
                         "Generated tokens of finished sequences' best hypotheses (</s> and language tokens included)")
# Per model: each model has its own engine loop, and several share a process (--no-ray, multiplexed replicas).
RUNNING = Mirrored(Gauge, "s2s_running_sequences", "Sequences in the running batch", ("model",),
                   multiprocess_mode="livesum")
WAITING = Mirrored(Gauge, "s2s_waiting_sequences", "Sequences waiting to be admitted", ("model",),
                   multiprocess_mode="livesum")
KV_ROWS_USED = Mirrored(Gauge, "s2s_kv_cache_rows_used", "KV-cache rows in use (a beam request holds one per beam)",
                        ("model",), multiprocess_mode="livesum")
BATCH_ROWS = Mirrored(Histogram, "s2s_batch_rows", "Rows decoded per engine step", buckets=ROW_BUCKETS)
STEP_TIME = Mirrored(Histogram, "s2s_engine_step_seconds", "Engine step time (admission + one decoder step)",
                     buckets=STEP_BUCKETS)
ENGINE_FAILURES = Mirrored(Counter, "s2s_engine_failures_total", "Engine steps that raised; their requests failed")
# Ray Serve: every replica sets its application's count, read from Serve's controller, so any one live replica's
# value is it; per application, as several may share a node's metrics directory.
REPLICAS = Mirrored(Gauge, "s2s_replicas", "Model replicas serving (Ray Serve; the autoscaler changes it)", ("app",),
                    multiprocess_mode="livemax")

ALL = (REQUESTS, REQUEST_LATENCY, QUEUE_WAIT, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, INPUT_TOKENS,
       OUTPUT_TOKENS, RUNNING, WAITING, KV_ROWS_USED, BATCH_ROWS, STEP_TIME, ENGINE_FAILURES, REPLICAS)


def reap_dead_processes(path: str) -> None:
    """Forget the live gauges of processes that died without saying so (a killed replica): prometheus-client's
    multiprocess files outlive their process, and a `livesum` gauge would keep its last value forever."""
    for name in os.listdir(path):
        match = re.fullmatch(r"gauge_live\w*_(\d+)\.db", name)
        if match and not pid_alive(int(match.group(1))):
            multiprocess.mark_process_dead(int(match.group(1)), path)


def scrape() -> bytes:
    """The /metrics text: this process's metrics, or in multiprocess mode those of every process on this node. Every
    metric is in it, those no process has recorded yet at zero."""
    for metric in ALL:
        metric.prom  # noqa: B018 (made here if not yet: see Mirrored.prom)
    if METRICS_DIR_ENV not in os.environ:
        return generate_latest(REGISTRY)
    reap_dead_processes(os.environ[METRICS_DIR_ENV])
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=os.environ[METRICS_DIR_ENV])
    return generate_latest(registry)


def process_count(metric: Mirrored) -> int:
    """This process's own total of the counter `metric`, over all its labels: in multiprocess mode /metrics sums
    every process of the node, so one replica's share is read here (Seq2SeqServer.describe)."""
    return int(sum(s.value for family in metric.prom.collect() for s in family.samples if s.name == metric.name))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def enable_ray_export(ray_metrics) -> None:
    """Call from a Serve replica's __init__ with `ray.serve.metrics`: from then on this process also records to
    Ray's metrics."""
    for metric in ALL:
        if metric.ray is None:
            metric.export_to_ray(ray_metrics)


BY_NAME = {metric.name: metric for metric in ALL}
_targets: dict[tuple[str, tuple[str, ...]], Mirrored | Labelled] = {}


def record(name: str, labels: tuple[str, ...], method: str, value: float) -> None:
    """One observation of the metric called `name` (inc, observe or set), with these label values."""
    target = _targets.get((name, labels))
    if target is None:
        metric = BY_NAME[name]
        target = _targets.setdefault((name, labels), metric.labels(*labels) if labels else metric)
    getattr(target, method)(value)


class EngineStats:
    """Every metric one model's engine loop records, written here (the loop only runs steps). Each observation
    goes to `sink` (metric name, label values, method, value): recorded in this process by default; an engine in
    a process of its own sends them to the server's (engine_process)."""

    def __init__(self, model: str, sink: Callable[[str, tuple[str, ...], str, float], None] = record):
        self.model, self.sink = (model,), sink

    def queues(self, waiting: int, running: int, rows_used: int) -> None:
        self.sink(WAITING.name, self.model, "set", waiting)
        self.sink(RUNNING.name, self.model, "set", running)
        self.sink(KV_ROWS_USED.name, self.model, "set", rows_used)

    def admitted(self, sequences, now: float) -> None:
        """`sequences` (engine.sequence.Sequence) joined the batch at `now`: each one's wait in the queue."""
        for sequence in sequences:
            self.sink(QUEUE_WAIT.name, (), "observe", now - sequence.arrived_at)

    def stepped(self, seconds: float, rows: int, update, now: float) -> None:
        """One engine step of `seconds` over `rows` rows and what it produced (a scheduler Update)."""
        self.sink(STEP_TIME.name, (), "observe", seconds)
        self.sink(BATCH_ROWS.name, (), "observe", rows)
        for sequence in update.first_step:
            self.sink(TIME_TO_FIRST_TOKEN.name, (), "observe", now - sequence.arrived_at)
        for sequence in update.finished:
            self.sink(INPUT_TOKENS.name, (), "inc", len(sequence.source_ids))
            self.sink(OUTPUT_TOKENS.name, (), "inc", sequence.output_tokens)
            if sequence.steps > 1:
                self.sink(TIME_PER_OUTPUT_TOKEN.name, (), "observe",
                          (now - sequence.first_token_at) / (sequence.steps - 1))

    def failed(self) -> None:
        self.sink(ENGINE_FAILURES.name, (), "inc", 1)
