"""Ray Serve, really started once per session on 127.0.0.1: replicas, multiplexing with LRU eviction,
replacement of a replica whose engine fails, metrics across replicas, and a two-node cluster on loopback.

HTTP reaches an application either through Serve's proxy (below its route prefix) or, as `python -m server`
serves it by default, from its replicas themselves, on a port of its own (`replica_http`); the tests of
behaviour that differs between the two run both ways, on one application that serves its own port while Serve's
proxy reaches it too (each deployment costs a replica's start and its model's load)."""

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from server_process import Scrape, eventually, free_port, send_and_keep_open, within_one_minute

from server.runtime.ray_main import PROXY_ENV, local_runtime_env, stop_serve
from server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_waiting_sequences=64, max_new_tokens=64)
# How long the tests that add, kill or remove replicas under load wait, and the deadline of their requests (and of
# Serve's proxy's retry of a lost replica's request): a replica's start imports torch, a retry may wait for the model's
# load into a fresh engine process, a drained request for the rest of its decoding. On two busy cores in one of CI's
# slow spells each ran past the 120 s waits, the 60 s deadline and the 30 s drain these tests had.
PATIENT_S = 180.0


@pytest.fixture(scope="session")
def metrics_dir(tmp_path_factory) -> Path:
    """PROMETHEUS_MULTIPROC_DIR of every Ray process: each replica writes its samples into files named by pid."""
    return tmp_path_factory.mktemp("metrics")


@pytest.fixture(scope="module")  # shut down with the module: an idle Ray + Serve keeps ~13 % of a core busy
def serve_url(metrics_dir):
    import ray
    from ray import serve

    # Ray's processes send their metrics to the export port every 10 s by default; every second here (the
    # floor), so that the export test waits a second or two. Ray's processes read it from the environment, as
    # Serve's proxies read the server's proxy settings (PROXY_ENV: a replica lost mid-request answers 503).
    interval = "RAY_metrics_report_interval_ms"
    env = {interval: "1000", Settings.env_name("request_timeout_s"): str(PATIENT_S), **PROXY_ENV}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({name: value for name, value in env.items() if saved[name] is None})
    try:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=6,
                 runtime_env=local_runtime_env(str(metrics_dir)), log_to_driver=False)
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    stop_serve()
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_models(checkpoints, tmp_path_factory):
    """A directory of three checkpoints (a registry source): tiny-a, tiny-b, tiny-c."""
    root = tmp_path_factory.mktemp("models")
    for name, source in zip(("tiny-a", "tiny-b", "tiny-c"), checkpoints.values()):
        (root / name).symlink_to(source)
    return root


@contextlib.contextmanager
def deployed(name: str, paths: list[str], settings: Settings = SETTINGS, **build_kwargs):
    """A Serve application at /name for one test; deleted afterwards so its replicas free their CPUs."""
    from ray import serve

    from server.runtime.deployment import build, deploy
    from server.front.registry import ModelRegistry

    if "max_models_per_replica" in build_kwargs:  # a setting
        settings = replace(settings, max_models_per_replica=build_kwargs.pop("max_models_per_replica"))
    handle = deploy(build(settings, ModelRegistry.from_paths(paths), **build_kwargs), name, route_prefix=f"/{name}")
    try:
        yield handle
    finally:
        # Its router (the handles made from it share it) pushes metrics to Serve's controller every second for as
        # long as this process lives: once a later test in this worker starts Ray again, every push fails and logs
        # a traceback. Python 3.11 parses source for a traceback's carets, and a fuzzing test's hypothesis, parsing
        # in the main thread meanwhile, failed with CPython's "AST constructor recursion depth mismatch" (gh-106905).
        handle.shutdown()
        serve.delete(name)


@contextlib.contextmanager
def deployed_at(serve_url: str, name: str, paths: list[str], settings: Settings = SETTINGS, **build_kwargs):
    """deployed(), served by its replicas on a free port (`replica_http`) and reached through Serve's proxy too;
    yields the application's URL per ingress ("serve-proxy", "replica-http") and a handle to its replicas."""
    settings = replace(settings, replica_http=True, port=free_port())
    with deployed(name, paths, settings, **build_kwargs) as handle:
        yield {"serve-proxy": f"{serve_url}/{name}", "replica-http": f"http://127.0.0.1:{settings.port}"}, handle


def translate(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/translate", json=body, timeout=PATIENT_S + 30)


@pytest.fixture(scope="module")
def main_app(serve_url):
    with deployed("main", [], replicas=2, max_models_per_replica=2) as handle:  # the embedded demo model
        yield f"{serve_url}/main", handle


def test_text_to_text_families_side_by_side(serve_url, text2text_checkpoints):
    """T5 and BART models in one application: /v1/generate picks each by name and gives the model layer's text."""
    from model import Translator

    paths = [text2text_checkpoints["t5_v1_1"], text2text_checkpoints["bart"]]
    with deployed("text2text", [str(p) for p in paths], max_models_per_replica=2):
        for path in paths:
            text = "summarize: The quick brown fox jumps over the lazy dog."
            response = httpx.post(f"{serve_url}/text2text/v1/generate", timeout=120,
                                  json={"model": path.name, "text": text, "max_new_tokens": 16, "num_beams": 2})
            assert response.status_code == 200, response.text
            assert response.json()["model"] == path.name
            alone = Translator.from_pretrained(path).translate([text], beam_size=2, max_new_tokens=16)[0]
            assert response.json()["text"] == alone.text


def test_deploy_raises_the_replicas_error_when_the_application_fails(serve_url):
    """deploy() (what python -m server and these tests start applications with) returns once the application
    runs and, for one whose replicas cannot start, raises with the replica's error instead of waiting on."""
    from ray import serve

    from server.runtime.deployment import deploy

    @serve.deployment(max_constructor_retry_count=1)
    class Broken:
        def __init__(self):
            raise ValueError("no such model: nowhere")

    try:
        with pytest.raises(RuntimeError, match="no such model: nowhere"):
            deploy(Broken.bind(), "broken", route_prefix="/broken")
    finally:
        serve.delete("broken")


def test_two_replicas_both_serve(main_app):
    url, handle = main_app
    results = [translate(url, text=f"one hundred and {n}", target_lang="de") for n in ("one", "two", "three")]
    assert all(r.status_code == 200 for r in results), results[0].text
    replicas = set()
    deadline = time.monotonic() + 60
    while len(replicas) < 2 and time.monotonic() < deadline:
        replicas.add(handle.describe.remote().result()["replica"])
    assert len(replicas) == 2
    models = httpx.get(f"{url}/v1/models").json()["data"]
    assert models[0]["id"] == "demo-numbers" and models[0]["languages"] == ["de", "fr", "es", "it"]


def test_two_replicas_share_one_keys_rate_limit_exactly(serve_url, metrics_dir, tmp_path):
    """The replicas of a node count a key's requests in one key store: 5 a minute admits 5, not 5 per replica."""
    settings = replace(SETTINGS, api_keys=("ray-key",), rate_limit_per_minute=5,
                       key_store=str(tmp_path / "keys.sqlite"))
    with deployed_at(serve_url, "keyed", [], settings, replicas=2) as (urls, handle):
        url = urls["replica-http"]
        pids = replica_pids(handle, 2)
        for fresh in (20, 60):  # a second burst in the next minute when the first (replicas loading) straddled two
            within_one_minute(fresh)
            minute = time.time() // 60
            statuses = [httpx.post(f"{url}/v1/translate", json={"text": "seven", "target_lang": "de"}, timeout=60,
                                   headers={"Authorization": "Bearer ray-key"}).status_code for _ in range(16)]
            if time.time() // 60 == minute:
                break
        assert sorted(statuses) == [200] * 5 + [429] * 11
        answered = {pid: process_scrape(metrics_dir, pid).get("s2s_requests_total", route="/v1/translate")
                    for pid in pids}
        assert all(answered.values()), answered  # both replicas took requests


def test_compatible_apis_and_the_page_answer_under_serve(main_app):
    """LibreTranslate and DeepL routes and the web page through the Serve ingress, below its route prefix (/main):
    the page names its assets relative to itself, so they load below the prefix too."""
    url, _ = main_app
    page = httpx.get(f"{url}/", timeout=60)
    assert page.headers["content-type"].startswith("text/html") and "<title>seq2seq-serve" in page.text
    script = page.text.split('src="', 1)[1].split('"', 1)[0]  # ui/<version>/app.js
    assert httpx.get(f"{url}/{script}", timeout=60).headers["content-type"].startswith("text/javascript")
    libre = httpx.post(f"{url}/translate", json={"q": ["forty-two"], "source": "auto", "target": "de"}, timeout=60)
    assert libre.json() == {"translatedText": ["zweiundvierzig"],
                            "detectedLanguage": [{"confidence": 100.0, "language": "en"}]}
    deepl = httpx.post(f"{url}/v2/translate", data={"text": "seven", "target_lang": "FR"}, timeout=60,
                       headers={"Authorization": "DeepL-Auth-Key any"})
    assert deepl.json()["translations"][0]["text"] == "sept"
    too_large = httpx.post(f"{url}/translate", content=b"q=" + b"x" * SETTINGS.max_body_bytes, timeout=60)
    assert too_large.status_code == 413 and set(too_large.json()) == {"error"}


def replica_pids(handle, count: int) -> set[int]:
    """The process ids of an application's `count` replicas (Serve routes each call to one of them)."""
    pids = set()
    while len(pids) < count:
        pids.add(handle.describe.remote().result()["pid"])
    return pids


def process_scrape(metrics_dir: Path, pid: int) -> Scrape:
    """The samples one process wrote into the multiprocess directory (one replica, not the node's sum)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    files = [str(f) for f in metrics_dir.glob(f"*_{pid}.db")]

    class OneProcess:
        def collect(self):
            return MultiProcessCollector.merge(files, accumulate=True)

    registry = CollectorRegistry()
    registry.register(OneProcess())
    return Scrape(generate_latest(registry).decode())


QUEUE_GAUGES = ("s2s_running_sequences", "s2s_waiting_sequences", "s2s_kv_cache_rows_used")


def test_streaming_and_metrics_through_serve(main_app):
    """/metrics sums the replicas' multiprocess files: its values move by what one streamed request did."""
    url, _ = main_app
    before = Scrape.of(url)
    with httpx.stream("POST", f"{url}/v1/generate", json={"text": ">>fr<< twelve", "stream": True},
                      timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]" and '"finish_reason"' in lines[-2]
    usage = json.loads(lines[-2][len("data:"):])["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    # The engine thread records a finished sequence just after handing its result over: poll briefly.
    polls = []

    def caught_up():
        polls.append(s := Scrape.of(url))
        return s.delta(before, "s2s_output_tokens_total") >= usage["output_tokens"] and not any(
            s.get(g) for g in QUEUE_GAUGES) and s

    after = eventually(caught_up, timeout=10)
    # the queue gauges are live sums over every replica of the node, other applications' too
    assert after, ("the output tokens never reached /metrics, or the queues never emptied",
                   [sample for sample in polls[-1].samples if sample[0] in QUEUE_GAUGES])
    assert after.delta(before, "s2s_requests_total", route="/v1/generate", status="200") == 1
    assert after.delta(before, "s2s_request_latency_seconds_count", route="/v1/generate") == 1
    assert after.delta(before, "s2s_requests_total", route="/metrics", status="200") == len(polls)  # earlier ones
    assert after.delta(before, "s2s_input_tokens_total") == usage["input_tokens"]
    assert after.delta(before, "s2s_output_tokens_total") == usage["output_tokens"]
    assert after.delta(before, "s2s_queue_wait_seconds_count") == 1
    assert after.delta(before, "s2s_time_to_first_token_seconds_count") == 1
    steps = after.delta(before, "s2s_engine_step_seconds_count")
    assert steps >= 1 and after.delta(before, "s2s_batch_rows_count") == steps
    assert httpx.get(f"{url}/readyz").status_code == 200


def test_metrics_reach_rays_metrics_export_port(main_app, metrics_dir):
    """What a multi-node cluster scrapes: every node's metrics export port carries the replicas' s2s metrics,
    and their values move with the requests (they reach the port every few seconds: poll until they have).
    Replicas that serve HTTP themselves (other tests' applications) do not export: the port's series of this
    application are compared with its own replicas' samples."""
    import ray

    url, handle = main_app
    pids = replica_pids(handle, 2)
    port = ray._private.worker.global_worker.node.metrics_export_port
    series = [("s2s_requests_total", {"route": "/v1/translate", "status": "200"}),  # from the HTTP app
              ("s2s_input_tokens_total", {}), ("s2s_output_tokens_total", {}),  # from the engines
              ("s2s_time_to_first_token_seconds_count", {})]
    before = Scrape.of(url)  # /metrics reads the replicas' files: exact at once
    responses = [translate(url, text="seven", target_lang="it", beam_size=1),
                 translate(url, text="forty two", target_lang="de", beam_size=4)]  # tokens of the best beam only
    assert [r.status_code for r in responses] == [200, 200]
    usage = [r.json()["usage"] for r in responses]
    expected = {"s2s_requests_total": 2, "s2s_input_tokens_total": sum(u["input_tokens"] for u in usage),
                "s2s_output_tokens_total": sum(u["output_tokens"] for u in usage),
                "s2s_time_to_first_token_seconds_count": 2}

    def own(name: str, labels: dict) -> float:
        return sum(process_scrape(metrics_dir, pid).get(name, **labels) for pid in pids)

    def exported_value(exported: Scrape, name: str, labels: dict) -> float:
        return exported.get("ray_" + name, application="main", **labels)

    def scrapes():
        """/metrics, which has moved by exactly what the requests did, and the export port, once it shows the
        application's values (each process reports every second or so)."""
        direct = Scrape.of(url)
        if any(direct.delta(before, name, **labels) != expected[name] for name, labels in series):
            return False
        exported = Scrape(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        return all(exported_value(exported, name, labels) == own(name, labels) for name, labels in series) \
            and (direct, exported)

    both = eventually(scrapes, timeout=60, interval=0.5)
    direct, exported = both or (Scrape.of(url), Scrape(httpx.get(f"http://127.0.0.1:{port}/metrics").text))
    for name, labels in series:  # which series did not move as the requests did, or never reached the port
        assert direct.delta(before, name, **labels) == expected[name], name
        assert exported_value(exported, name, labels) == own(name, labels), name
    # Every replica's series carries its deployment.
    deployments = {labels.get("deployment") for name, labels, _ in exported.samples
                   if name in ("ray_s2s_requests_total", "ray_s2s_output_tokens_total")}
    assert deployments == {"Seq2SeqServer"}, deployments


@pytest.fixture(scope="session")
def slow_checkpoint(tmp_path_factory) -> Path:
    """A wider, deeper random model: seconds per 8-beam sequence of 250 tokens, ten times the tiny one's."""
    from marian_fixtures import build_checkpoint

    return build_checkpoint(tmp_path_factory.mktemp("slow") / "slow", d_model=256, decoder_layers=6)


SLOW = Settings(dtype="float32", max_batch_rows=8, max_waiting_sequences=32, max_new_tokens=250,
                request_timeout_s=PATIENT_S, drain_timeout_s=PATIENT_S)


@pytest.fixture(scope="module")
def slow_app(serve_url, slow_checkpoint):
    """One replica of the slow model (SLOW: 8 rows, 32 waiting), autoscaled between 1 and 1 (so that it reports
    its rows), with the model loaded; yields its URLs and handle. Its last test deletes it."""
    from server.runtime.autoscaling import Scaling

    with deployed_at(serve_url, "slow", [str(slow_checkpoint)], SLOW, scaling=Scaling(1, 1)) as (urls, handle):
        assert translate(urls["replica-http"], text="hello", max_new_tokens=2).status_code == 200
        yield urls, handle


def test_hang_up_on_a_plain_request_under_serve_cancels_it(slow_app, metrics_dir):
    """A client that hangs up on a non-streaming request: the replica's request is cancelled (by Serve's proxy,
    or by the replica's own HTTP server), and its sequences leave the batch (that replica's own gauges say so)."""
    urls, handle = slow_app
    pid = handle.describe.remote().result()["pid"]

    def replica() -> Scrape:
        return process_scrape(metrics_dir, pid)

    for ingress, url in urls.items():
        long = {"text": [f"hello world {i}" for i in range(24)], "beam_size": 8, "max_new_tokens": 250}
        conn = send_and_keep_open(url, "/v1/translate", long)
        try:  # decoding: one sequence of 8 beams fills the batch (rows show after its first step), 23 wait
            decoding = eventually(lambda: (s := replica()).get("s2s_running_sequences") == 1
                                  and s.get("s2s_kv_cache_rows_used") == 8
                                  and s.get("s2s_waiting_sequences") > 0 and s, timeout=30)
            assert decoding, (ingress, "the long translation never started decoding")
            at_hang_up = replica()
        finally:
            conn.close()
        hung_up = time.monotonic()
        idle = eventually(lambda: (s := replica()).get("s2s_running_sequences") == 0
                          and s.get("s2s_waiting_sequences") == 0 and s.get("s2s_kv_cache_rows_used") == 0 and s,
                          timeout=15)
        waited = time.monotonic() - hung_up
        last = replica()
        assert idle, (ingress, "the replica kept decoding after the client hung up: "
                      f"{last.get('s2s_running_sequences')} running, {last.get('s2s_waiting_sequences')} waiting, "
                      f"{last.delta(at_hang_up, 's2s_output_tokens_total')} tokens finished since")
        assert waited < 5, ingress  # one of the 24 sequences alone takes about that long
        assert idle.delta(at_hang_up, "s2s_output_tokens_total") == 0  # the decoding one left unfinished
        assert idle.delta(at_hang_up, "s2s_queue_wait_seconds_count") == 0  # the waiting ones never ran
        assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def reported_rows(app: str) -> list[tuple[float, float]]:
    """The demand rows each replica of `app` reported, as Serve's controller holds them for its autoscaling
    policy: (time, rows) of every replica's last sample."""
    import ray
    from ray.serve._private.common import DeploymentID
    from ray.serve.context import _get_global_client

    from server.runtime.rows_policy import DEMAND_ROWS

    controller = _get_global_client()._controller
    reports = ray.get(controller._get_metrics_for_deployment_for_testing.remote(DeploymentID("Seq2SeqServer", app)))
    return [(series[-1].timestamp, series[-1].value) for series in reports.get(DEMAND_ROWS, []) if series]


def test_the_autoscaler_receives_the_engines_rows_in_use_and_waiting(slow_app, metrics_dir):
    """A replica serving HTTP itself (no request passes through Serve) reports its engine's rows: 16 beam-4
    sentences on 8 rows are 2 running and 14 waiting, 64 rows, then less as pairs finish. Each report the
    controller holds is what the engine's own gauges (rows in use + 4 × waiting) said within two report intervals
    of it (a report is sampled each second, on the replica's event loop: up to a second more on a busy box; the
    gauges' files may lag it as much)."""
    from server.runtime.autoscaling import METRICS_INTERVAL_S

    urls, handle = slow_app
    url = urls["replica-http"]
    pid = handle.describe.remote().result()["pid"]
    request = threading.Thread(target=translate, args=(url,), daemon=True,
                               kwargs=dict(text=[f"hello world {i}" for i in range(16)], beam_size=4))
    request.start()
    seen: list[tuple[float, float]] = []  # (time, the engine's rows) every 0.1 s

    def engine_rows() -> float:
        gauges = process_scrape(metrics_dir, pid)
        seen.append((time.time(), gauges.get("s2s_kv_cache_rows_used") + 4 * gauges.get("s2s_waiting_sequences")))
        return seen[-1][1]

    assert eventually(lambda: engine_rows() == 64, timeout=30, interval=0.1), seen[-1]
    reports = set()
    while len(reports) < 5 and request.is_alive():  # up to five reports while pairs of sentences finish
        engine_rows()
        reports.update((t, rows) for t, rows in reported_rows("slow") if t > seen[0][0] + 2 * METRICS_INTERVAL_S)
        time.sleep(0.1)
    assert len(reports) >= 3, reports  # the request may end sooner on a fast box
    for _ in range(int(20 * METRICS_INTERVAL_S)):  # the gauges for as long after the last report as before it
        engine_rows()
        time.sleep(0.1)
    for t, rows in reports:  # the gauges' files and the report are written apart: either may lag the other
        assert rows in {r for at, r in seen if abs(at - t) <= 2 * METRICS_INTERVAL_S}, (t, rows, seen)
    assert max(rows for _, rows in reports) > 8  # not an idle replica's
    request.join(PATIENT_S + 30)


def test_health_answers_at_once_while_every_replica_is_saturated(slow_app, metrics_dir):
    """Every row decoding and the engine's queue full: /healthz and /readyz still answer 200 within a second (the
    replica answers them itself, beside its engine: they never queue behind decoding work)."""
    urls, handle = slow_app
    pid = handle.describe.remote().result()["pid"]

    def gauges():
        s = process_scrape(metrics_dir, pid)
        return s.get("s2s_kv_cache_rows_used"), s.get("s2s_waiting_sequences")

    def saturated():
        return gauges() == (SLOW.max_batch_rows, SLOW.max_waiting_sequences)

    for ingress, url in urls.items():
        # the last ingress's requests, hung up on, leave the engine first
        assert eventually(lambda: gauges() == (0, 0), timeout=30), (ingress, gauges())
        long = {"text": "hello world", "max_new_tokens": 250, "beam_size": 2}  # beams: no early </s> (as above)
        # 4 decode first (sent all at once, a busy engine may admit some while the queue fills), then 32 wait
        # (the engine's queue is full: a replica whose ongoing requests Serve capped at rows + queue would queue
        # health checks behind them) and 2 more get 503 at once
        connections = [send_and_keep_open(url, "/v1/translate", long) for _ in range(SLOW.max_batch_rows // 2)]
        try:
            assert eventually(lambda: gauges()[0] == SLOW.max_batch_rows, timeout=30), (ingress, gauges())
            connections += [send_and_keep_open(url, "/v1/translate", long)
                            for _ in range(SLOW.max_waiting_sequences + 2)]
            assert eventually(saturated, timeout=30), (ingress, "the engine never filled its rows and its queue",
                                                       gauges())
            for path in ("/healthz", "/readyz"):
                start = time.monotonic()
                response = httpx.get(f"{url}{path}", timeout=10)
                assert response.status_code == 200 and time.monotonic() - start < 1, (ingress, path,
                                                                                       response.text)
            assert saturated(), (ingress, "the replica was no longer saturated when health answered")
        finally:
            for connection in connections:
                connection.close()


def test_replica_http_drains_in_flight_requests_when_the_app_is_deleted(slow_app, metrics_dir):
    """Deleting the application stops each replica's HTTP server gracefully: the port closes to new connections
    while a request in flight goes on, and that request finishes with its answer. (The last test of slow_app.)"""
    from ray import serve

    urls, handle = slow_app
    url = urls["replica-http"]
    pid = handle.describe.remote().result()["pid"]
    answers = []  # 8 sequences of 4 beams, 2 at a time: seconds of decoding
    request = threading.Thread(target=lambda: answers.append(
        translate(url, text=[f"hello world {i}" for i in range(8)], beam_size=4, max_new_tokens=250)))
    request.start()
    assert eventually(lambda: process_scrape(metrics_dir, pid).get("s2s_running_sequences") == 2, timeout=30)
    threading.Thread(target=serve.delete, args=("slow",), daemon=True).start()

    def refused() -> bool:
        try:
            httpx.get(f"{url}/healthz", timeout=5)
            return False
        except (httpx.ConnectError, httpx.ReadError):  # refused, or reset from the backlog as the port closed
            return True

    assert eventually(refused, timeout=30, interval=0.1), "the port stayed open"
    assert not answers, "the request finished before the port closed: make it longer"
    request.join(PATIENT_S + 30)
    assert answers and answers[0].status_code == 200, answers
    assert len(answers[0].json()["translations"]) == 8


@pytest.fixture(scope="module")
def tiny_app(serve_url, tiny_models):
    """One replica of the three tiny models, two at a time; yields its URL and handle."""
    with deployed("tiny", [str(tiny_models)], replicas=1, max_models_per_replica=2) as handle:
        yield f"{serve_url}/tiny", handle


def test_multiplexing_routes_models_and_evicts_least_recently_used(tiny_app):
    url, handle = tiny_app
    for name in ("tiny-a", "tiny-b", "tiny-a", "tiny-c"):  # whatever the replica held before: tiny-b is the LRU
        response = translate(url, text="hello world", model=name, max_new_tokens=4)
        assert response.status_code == 200 and response.json()["model"] == name
    assert sorted(handle.describe.remote().result()["models"]) == ["tiny-a", "tiny-c"]
    assert translate(url, text="hello", model="nope").status_code == 404


def test_streams_for_a_model_the_replica_is_loading_all_finish(tiny_app):
    """Streams ask, four at a time, for a model the replica does not hold (two of three at a time), so Serve's
    multiplexing routes them, and it picks this same replica: a stream forwarded over a handle back to its own
    replica stalled midway (Ray 2.60). Each must end with its final event and [DONE]."""
    url, handle = tiny_app

    async def stream(client, model: str) -> list[str]:
        body = {"text": "hello world", "model": model, "stream": True, "max_new_tokens": 16}
        async with client.stream("POST", f"{url}/v1/generate", json=body) as response:
            assert response.status_code == 200
            return [line async for line in response.aiter_lines() if line.startswith("data: ")]

    async def turns():
        # a stall hangs for good; a busy box loads the other model in tens of seconds
        async with httpx.AsyncClient(timeout=60) as client:
            for turn in range(4):  # each turn loads a model in place of the least recently used
                held = (await handle.describe.remote())["models"]
                model = min({"tiny-a", "tiny-b", "tiny-c"} - set(held))
                for events in await asyncio.gather(*(stream(client, model) for _ in range(4))):
                    assert events[-1] == "data: [DONE]" and '"finish_reason"' in events[-2], (turn, events)
                assert (await handle.describe.remote())["models"][-1] == model

    asyncio.run(turns())


def test_replicas_on_one_port_and_a_crash_under_load_loses_nothing_or_fails_fast_and_recovers(
        serve_url, tiny_models, metrics_dir):
    """Two replicas serving HTTP themselves share the application's port (check_one_port). Then the replica
    decoding the load, killed: through Serve's proxy its requests go once more, to the other replica, and none
    fails (runtime.replica_lost); served by the replicas themselves, the connections it held break with it (as a
    killed --no-ray worker's do), at once, and those the other forwarded to it go once more. Either way the other
    replica goes on serving while Serve starts a replacement, and the time until the replacement answers is
    printed. Through the proxy first, then (a replica replaced) on the replicas' port."""
    settings = replace(SETTINGS, request_timeout_s=PATIENT_S)
    with deployed_at(serve_url, "crash", [str(tiny_models / "tiny-a")], settings, replicas=2,
                     health_check_period_s=1) as (urls, handle):
        check_one_port(urls["replica-http"], handle, metrics_dir)
        for ingress, url in urls.items():
            check_crash_recovery(url, handle, ingress, metrics_dir)


def check_one_port(url, handle, metrics_dir: Path):
    """replica_http: both replicas of the application accept connections on its port (the kernel spreads them),
    answer alike, and the port's /metrics sums the node's replicas."""
    pids = replica_pids(handle, 2)
    before = Scrape.of(url)
    responses = [translate(url, text="forty-two", max_new_tokens=8) for _ in range(40)]  # a connection each
    assert {r.status_code for r in responses} == {200}
    assert len({json.dumps(r.json()["translations"]) for r in responses}) == 1
    served = {pid: process_scrape(metrics_dir, pid).get("s2s_requests_total", route="/v1/translate", status="200")
              for pid in pids}
    assert all(served.values()) and sum(served.values()) == 40, served
    after = Scrape.of(url)
    assert after.delta(before, "s2s_requests_total", route="/v1/translate", status="200") == 40


def check_crash_recovery(url, handle, ingress: str, metrics_dir: Path):
    retried = ingress == "serve-proxy"
    pids = replica_pids(handle, 2)
    before = {pid: process_scrape(metrics_dir, pid) for pid in pids}
    outcomes, stop = [], threading.Event()
    answered = set()  # the clients with an answer: their next requests did not wait for the model's load

    def client(number: int):
        with httpx.Client(timeout=PATIENT_S + 30) as http:  # one connection pool: a connection a request costs CPU
            while not stop.is_set():
                start = time.monotonic()
                try:
                    r = http.post(f"{url}/v1/translate", json={"text": ["hello world"] * 4, "max_new_tokens": 60})
                    outcomes.append((r.status_code, time.monotonic() - start, r.text, start))
                    answered.add(number)
                except httpx.HTTPError as e:
                    outcomes.append((0, time.monotonic() - start, repr(e), start))

    workers = [threading.Thread(target=client, args=(number,)) for number in range(6)]
    for w in workers:
        w.start()
    try:
        # the load decoding, every client past its first answer (on a busy box the first answers take up to a
        # minute, the replica loading the model first: a request killed then has little of its deadline left for
        # its retry, which may load the model again)
        assert eventually(lambda: len(answered) == len(workers), timeout=180), outcomes
        loaded_at = time.monotonic()
        # the replica decoding the load (the other forwards its requests there: runtime.forwarding), by its
        # engine's steps since the round began (the replicas' own metrics files: a call through Serve, routed
        # away from a replica at its limit of ongoing requests, would not reach it)
        steps = {pid: process_scrape(metrics_dir, pid).delta(before[pid], "s2s_engine_step_seconds_count")
                 for pid in pids}
        killed = max(steps, key=steps.get)
        assert steps[killed] > 0, steps
        os.kill(killed, signal.SIGKILL)
        killed_at = time.monotonic()
        time.sleep(4)
    finally:  # whatever failed above: clients left running would load every later test (and keep pytest alive)
        stop.set()
        for w in workers:
            w.join(60)
    failures = [o[:3] for o in outcomes if o[0] != 200]

    def replacement() -> set[int]:  # a replica that was not there before the kill answers
        from ray.exceptions import RayActorError

        try:
            return {handle.describe.remote().result(timeout_s=30)["pid"] for _ in range(4)} - pids
        except RayActorError:  # routed to the dead one before this handle's router learned it died
            return set()

    replaced = eventually(replacement, timeout=PATIENT_S, interval=0.2)

    def timeline(outcome) -> tuple[int, float, float]:  # (status, seconds, start after the kill)
        status, elapsed, _, start = outcome
        return status, round(elapsed, 1), round(start - killed_at, 1)

    print(f"{ingress}: {len(outcomes)} requests under load, {len(failures)} failed when the replica holding the model "
          f"was killed ({sorted({o[0] for o in failures})}); a replacement answered "
          f"{time.monotonic() - killed_at:.1f} s after the kill; (status, seconds, start after the kill): "
          f"{[timeline(o) for o in outcomes]}")
    if retried:
        assert failures == [], failures[:3]
    else:  # only the connections the killed replica held broke
        assert all(status == 0 for status, _, _ in failures), failures[:3]
    late = [timeline(o) for o in outcomes if o[3] >= loaded_at and o[1] >= PATIENT_S]
    assert late == [], f"(status, seconds, start after the kill): {late}"
    assert replaced
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_overload_gets_503_with_retry_after_and_a_replica_with_failed_engine_is_replaced(serve_url, tiny_models):
    """A burst over the engine's rows and queue: 503 with Retry-After for what does not fit, 200 for the rest.
    Then the replica's engine stopped: Serve replaces the replica, which then answers through Serve's proxy; and
    once more: the new one serves the port in its place."""
    small = Settings(dtype="float32", max_batch_rows=2, max_waiting_sequences=2, max_new_tokens=64)
    with deployed_at(serve_url, "overload", [str(tiny_models / "tiny-a")], small, replicas=1,
                     health_check_period_s=1) as (urls, handle):
        for ingress, url in urls.items():

            async def burst():
                async with httpx.AsyncClient(timeout=120) as client:
                    return await asyncio.gather(*(client.post(f"{url}/v1/translate", json={
                        "text": f"hello {i}", "max_new_tokens": 60, "beam_size": 1}) for i in range(30)))

            responses = asyncio.run(burst())
            statuses = [r.status_code for r in responses]
            assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses, (ingress, statuses)
            assert all(r.headers.get("retry-after") for r in responses if r.status_code == 503), ingress
            assert translate(url, text="hello", max_new_tokens=4).status_code == 200
        for url in urls.values():
            check_replacement(url, handle)


def check_replacement(url, handle):
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200
    before = handle.describe.remote().result()["replica"]
    handle.stop_engines.remote().result()

    def replica() -> str | None:  # None while no replica answers
        try:
            return handle.describe.remote().result(timeout_s=10)["replica"]
        except Exception:
            return None

    replaced = eventually(lambda: (r := replica()) not in (None, before) and r, timeout=PATIENT_S, interval=1)
    assert replaced, f"no replica other than {before} answered within {PATIENT_S} s"
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_two_node_cluster_on_loopback_runs_replicas_on_both_nodes_and_counts_keys_once(tmp_path):
    """Replicas on both nodes answer; a key limited to 5 a minute gets 5 across them, charged once each; only the
    head node's replica holds the key store file (the other goes through the head node's actor). Under a short
    locust run both nodes' replicas serve, nothing fails, and their counts add up to locust's requests."""
    script = ROOT / "tests" / "two_node_cluster.py"
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for line in ("nodes with replicas: 2", "http answers: 20/20", "limited key: 5 x 200, 11 x 429",
                 "limited key's characters: 45", "replicas holding the key store file: 1 of 2", "key store actors: 1",
                 "nodes that served under locust: 2"):
        assert line in result.stdout, result.stdout
    sent = re.search(r"locust: (\d+) requests, (\d+) failures", result.stdout)
    answered = re.search(r"requests answered under locust, per node: .* = (\d+)", result.stdout)
    assert sent and answered, result.stdout
    assert int(sent[1]) > 0 and int(sent[2]) == 0 and int(answered[1]) == int(sent[1]), result.stdout


def test_families_side_by_side_route_by_language_and_share_limits(serve_url, checkpoint, family_checkpoints):
    """Marian, NLLB and mBART-50 under Serve's multiplexing (two models per replica): language pairs route to a
    model that serves them, /v1/models lists every family with limits clamped to each model's positions (the
    same function as in-process), and those limits are exactly what requests may use."""
    from server.front.registry import ModelRegistry, model_info

    settings = Settings(dtype="float32", max_batch_rows=16, max_waiting_sequences=64, max_new_tokens=200)
    paths = [str(checkpoint), str(family_checkpoints["nllb"]), str(family_checkpoints["mbart50"])]
    with deployed("families", paths, settings=settings, replicas=1, max_models_per_replica=2) as handle:
        url = f"{serve_url}/families"
        cards = {c["id"]: c for c in httpx.get(f"{url}/v1/models").json()["data"]}
        registry = ModelRegistry.from_paths(paths)
        for name, entry in registry.entries.items():
            info = model_info(entry, settings)
            assert cards[name]["limits"]["max_new_tokens"] == info.max_new_tokens
            assert cards[name]["family"] == entry.family
        nllb, mbart = family_checkpoints["nllb"].name, family_checkpoints["mbart50"].name
        assert cards[nllb]["limits"]["max_new_tokens"] == 127  # 128 positions, under the server's 200
        assert cards[checkpoint.name]["limits"]["max_new_tokens"] == 200

        routed = {(s, t): translate(url, text="The frog drinks water.", source_lang=s, target_lang=t,
                                    max_new_tokens=8)
                  for s, t in (("en", "de"), ("en", "es"), ("de", "fr_XX"), ("en", "zh-Hant"), ("fr", "ast"))}
        # The most specific model that serves the pair: Marian (2 pairs), then mBART-50 (52²), then NLLB (202²).
        assert {k: r.json()["model"] for k, r in routed.items()} == {
            ("en", "de"): checkpoint.name, ("en", "es"): mbart, ("de", "fr_XX"): mbart, ("en", "zh-Hant"): nllb,
            ("fr", "ast"): nllb}
        assert translate(url, text="x", model=mbart, target_lang="fr", max_new_tokens=127).status_code == 200
        too_many = translate(url, text="x", model=mbart, target_lang="fr", max_new_tokens=128)
        assert too_many.status_code == 422 and too_many.json()["error"]["limit"] == 127
        unknown = translate(url, text="x", model=nllb, target_lang="xx")
        assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "target_lang"
        assert len(handle.describe.remote().result()["models"]) == 2  # the least recently used was evicted


def test_autoscaling_adds_a_replica_under_load_and_removes_it_after_losing_nothing(serve_url):
    """min 1 / max 2 replicas with short delays (runtime.autoscaling), replicas of 2 rows: 8 clients at once ask
    for 8 rows and take the count (in /v1/models and the s2s_replicas gauge) to 2; then one client alone, streaming,
    whose streams go on while Serve removes a replica (it drains what it has), sees the count back at 1. Every
    request answers 200 and every stream ends with [DONE], through Serve's proxy and from the replicas' own port."""
    from server.runtime.autoscaling import Scaling

    settings = replace(SETTINGS, max_batch_rows=2)
    scaling = Scaling(1, 2, upscale_delay_s=1, downscale_delay_s=2)
    with deployed_at(serve_url, "autoscaled", [], settings, scaling=scaling) as (urls, _):
        for ingress, url in urls.items():
            check_autoscaling(ingress, url)


def check_autoscaling(ingress: str, url: str) -> None:
    statuses: list[int | str] = []
    burst_over, done = threading.Event(), threading.Event()

    def client(until: threading.Event):
        with httpx.Client(timeout=60) as http:
            while not until.is_set():
                body = {"text": "one hundred and twenty three", "target_lang": "de"}
                statuses.append(http.post(f"{url}/v1/translate", json=body).status_code)

    def streaming_client():
        body = {"text": ">>fr<< one hundred and twenty three", "stream": True}
        with httpx.Client(timeout=60) as http:
            while not done.is_set():
                with http.stream("POST", f"{url}/v1/generate", json=body) as response:
                    ended = "data: [DONE]" in response.read().decode()
                    statuses.append(response.status_code if ended or response.status_code != 200 else "cut")
                # a pause between streams: one row held back to back is a 2-row replica at half, the bound
                # below which one replica fewer is enough
                done.wait(0.3)

    def replicas() -> tuple[int, float] | str:
        try:
            listed = {m["replicas"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
            gauge = Scrape.of(url).get("s2s_replicas", app="autoscaled")
        except httpx.TransportError as e:
            # replica HTTP: a new connection the kernel queued on the listener of the replica Serve removes is
            # reset as it closes (SO_REUSEPORT; deploy/README.md, net.ipv4.tcp_migrate_req); polled again
            return repr(e)
        return listed.pop() if len(listed) == 1 else listed, gauge

    threads = [threading.Thread(target=streaming_client, daemon=True)]
    threads += [threading.Thread(target=client, args=(burst_over,), daemon=True) for _ in range(7)]
    for thread in threads:
        thread.start()
    try:
        # bounds, not targets: a new replica imports torch and loads the model, and under xdist the other
        # worker's tests share the two cores
        assert eventually(lambda: replicas() == (2, 2), timeout=PATIENT_S, interval=0.5), (ingress, replicas())
        burst_over.set()  # the streaming client goes on
        assert eventually(lambda: replicas() == (1, 1), timeout=PATIENT_S, interval=1), (ingress, replicas())
    finally:
        burst_over.set()
        done.set()
        for thread in threads:
            thread.join(10)
    assert statuses and set(statuses) == {200}, (ingress, sorted(set(statuses)))
