"""Every Prometheus metric of the server, created here and only here."""

from __future__ import annotations

import os

from prometheus_client import Counter, Gauge, Histogram

# In multiprocess mode (Ray Serve replicas) every process writes its samples into this directory.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)

REQUESTS = Counter("s2s_requests_total", "HTTP requests by route and status code", ["route", "status"])
REQUEST_LATENCY = Histogram("s2s_request_latency_seconds", "HTTP request latency", ["route"],
                            buckets=LATENCY_BUCKETS)
QUEUE_WAIT = Histogram("s2s_queue_wait_seconds", "Time a sequence waited before joining the batch",
                       buckets=LATENCY_BUCKETS)
TIME_TO_FIRST_TOKEN = Histogram("s2s_time_to_first_token_seconds", "Arrival to first generated token",
                                buckets=LATENCY_BUCKETS)
TIME_PER_OUTPUT_TOKEN = Histogram("s2s_time_per_output_token_seconds", "Decoding time per token after the first",
                                  buckets=STEP_BUCKETS)
INPUT_TOKENS = Counter("s2s_input_tokens_total", "Source tokens of finished sequences")
OUTPUT_TOKENS = Counter("s2s_output_tokens_total", "Generated tokens of finished sequences")
RUNNING = Gauge("s2s_running_sequences", "Sequences in the running batch", multiprocess_mode="livesum")
WAITING = Gauge("s2s_waiting_sequences", "Sequences waiting to be admitted", multiprocess_mode="livesum")
KV_ROWS_USED = Gauge("s2s_kv_cache_rows_used", "KV-cache rows in use (a beam request holds one per beam)",
                     multiprocess_mode="livesum")
BATCH_ROWS = Histogram("s2s_batch_rows", "Rows decoded per engine step",
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
STEP_TIME = Histogram("s2s_engine_step_seconds", "Engine step time (admission + one decoder step)",
                      buckets=STEP_BUCKETS)
ENGINE_FAILURES = Counter("s2s_engine_failures_total", "Engine steps that raised; their requests failed")
