"""Ray Serve under faults and load (tests/e2e/conftest.py starts it): drains, hang-ups, saturated replicas, a
failed engine replaced, a replica killed under load, overload, autoscaling up and down. The tests of behaviour that
differs between Serve's proxy and the replicas' own HTTP run both ways."""

import asyncio
import os
import signal
import threading
import time
from dataclasses import replace

import httpx
from ray_serve_apps import (
    INGRESSES,
    SETTINGS,
    deployed,
    deployed_at,
    process_scrape,
    replica_pids,
    translate,
)
from server_process import (
    Scrape,
    eventually,
    send_and_keep_open,
)

from server.settings import Settings


def test_replica_http_drains_in_flight_requests_when_the_app_is_deleted(serve_url, metrics_dir, slow_checkpoint):
    """Deleting the application stops each replica's HTTP server gracefully: the port closes to new connections
    while a request in flight goes on, and that request finishes with its answer."""
    from ray import serve

    settings = Settings(dtype="float32", max_batch_rows=8, max_new_tokens=250)
    with deployed_at(serve_url, "replica-http", "drain", [str(slow_checkpoint)], settings) as (url, handle):
        assert translate(url, text="hello", max_new_tokens=2).status_code == 200  # the replica loads the model
        pid = handle.describe.remote().result()["pid"]
        answers = []  # 8 sequences of 4 beams, 2 at a time: seconds of decoding
        request = threading.Thread(target=lambda: answers.append(
            translate(url, text=[f"hello world {i}" for i in range(8)], beam_size=4, max_new_tokens=250)))
        request.start()
        assert eventually(lambda: process_scrape(metrics_dir, pid).get("s2s_running_sequences") == 2, timeout=30)
        threading.Thread(target=serve.delete, args=("drain",), daemon=True).start()

        def refused() -> bool:
            try:
                httpx.get(f"{url}/healthz", timeout=5)
                return False
            except (httpx.ConnectError, httpx.ReadError):  # refused, or reset from the backlog as the port closed
                return True

        assert eventually(refused, timeout=30, interval=0.1), "the port stayed open"
        assert not answers, "the request finished before the port closed: make it longer"
        request.join(60)
        assert answers and answers[0].status_code == 200, answers
        assert len(answers[0].json()["translations"]) == 8


@INGRESSES
def test_hang_up_on_a_plain_request_under_serve_cancels_it(serve_url, metrics_dir, slow_checkpoint, ingress):
    """A client that hangs up on a non-streaming request: the replica's request is cancelled (by Serve's proxy,
    or by the replica's own HTTP server), and its sequences leave the batch (that replica's own gauges say so)."""
    settings = Settings(dtype="float32", max_batch_rows=8, max_waiting_sequences=128, max_new_tokens=250)
    with deployed_at(serve_url, ingress, "hangup", [str(slow_checkpoint)], settings, replicas=1) as (url, handle):
        assert translate(url, text="hello", max_new_tokens=2).status_code == 200  # the replica loads the model
        pid = handle.describe.remote().result()["pid"]

        def replica() -> Scrape:
            return process_scrape(metrics_dir, pid)

        long = {"text": [f"hello world {i}" for i in range(64)], "beam_size": 8, "max_new_tokens": 250}
        conn = send_and_keep_open(url, "/v1/translate", long)
        try:  # decoding: one sequence of 8 beams fills the batch (rows show after its first step), 63 wait
            decoding = eventually(lambda: (s := replica()).get("s2s_running_sequences") == 1
                                  and s.get("s2s_kv_cache_rows_used") == 8
                                  and s.get("s2s_waiting_sequences") > 0 and s, timeout=30)
            assert decoding, "the long translation never started decoding"
            at_hang_up = replica()
        finally:
            conn.close()
        hung_up = time.monotonic()
        idle = eventually(lambda: (s := replica()).get("s2s_running_sequences") == 0
                          and s.get("s2s_waiting_sequences") == 0 and s.get("s2s_kv_cache_rows_used") == 0 and s,
                          timeout=15)
        waited = time.monotonic() - hung_up
        last = replica()
        assert idle, ("the replica kept decoding after the client hung up: "
                      f"{last.get('s2s_running_sequences')} running, {last.get('s2s_waiting_sequences')} waiting, "
                      f"{last.delta(at_hang_up, 's2s_output_tokens_total')} tokens finished since")
        assert waited < 5  # one of the 64 sequences alone takes about that long
        assert idle.delta(at_hang_up, "s2s_output_tokens_total") == 0  # the decoding one left unfinished
        assert idle.delta(at_hang_up, "s2s_queue_wait_seconds_count") == 0  # the waiting ones never ran
        assert translate(url, text="hello", max_new_tokens=4).status_code == 200


@INGRESSES
def test_health_answers_at_once_while_every_replica_is_saturated(serve_url, metrics_dir, slow_checkpoint, ingress):
    """Every row decoding and the engine's queue full: /healthz and /readyz still answer 200 within a second (the
    replica answers them itself, beside its engine: they never queue behind decoding work)."""
    settings = Settings(dtype="float32", max_batch_rows=4, max_waiting_sequences=32, max_new_tokens=250)
    with deployed_at(serve_url, ingress, "saturated", [str(slow_checkpoint)], settings, replicas=1) as (url, handle):
        assert translate(url, text="hello", max_new_tokens=2).status_code == 200  # the replica loads the model
        pid = handle.describe.remote().result()["pid"]

        def gauges():
            s = process_scrape(metrics_dir, pid)
            return s.get("s2s_kv_cache_rows_used"), s.get("s2s_waiting_sequences")

        def saturated():
            return gauges() == (4, 32)

        long = {"text": "hello world", "max_new_tokens": 250, "beam_size": 2}  # beams: no early </s> (as above)
        # 2 decode first (sent all at once, a busy engine may admit one while the queue fills), then 32 wait (the
        # engine's queue is full: a replica whose ongoing requests Serve capped at rows + queue would queue health
        # checks behind them) and 2 more get 503 at once
        connections = [send_and_keep_open(url, "/v1/translate", long) for _ in range(2)]
        try:
            assert eventually(lambda: gauges()[0] == 4, timeout=30), gauges()
            connections += [send_and_keep_open(url, "/v1/translate", long) for _ in range(34)]
            assert eventually(saturated, timeout=30), ("the engine never filled its rows and its queue", gauges())
            for path in ("/healthz", "/readyz"):
                start = time.monotonic()
                response = httpx.get(f"{url}{path}", timeout=10)
                assert response.status_code == 200 and time.monotonic() - start < 1, (path, response.text)
            assert saturated(), "the replica was no longer saturated when health answered"
        finally:
            for connection in connections:
                connection.close()


@INGRESSES
def test_replica_with_failed_engine_is_replaced(serve_url, tiny_models, ingress):
    """Serve replaces the replica; with replica_http the new one serves the port in its place."""
    with deployed_at(serve_url, ingress, "fault", [str(tiny_models / "tiny-a")], replicas=1,
                     health_check_period_s=1) as (url, handle):
        check_replacement(url, handle)


def check_replacement(url, handle):
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200
    before = handle.describe.remote().result()["replica"]
    handle.stop_engines.remote().result()
    deadline = time.monotonic() + 120
    replaced = None
    while time.monotonic() < deadline:
        try:
            replaced = handle.describe.remote().result(timeout_s=10)["replica"]
        except Exception:
            replaced = None
        if replaced not in (None, before):
            break
        time.sleep(1)
    assert replaced not in (None, before)
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


@INGRESSES
def test_replica_crash_under_load_loses_nothing_or_fails_fast_and_recovers(serve_url, tiny_models, ingress):
    """The replica decoding the load, killed: through Serve's proxy its requests go once more, to the other
    replica, and none fails (runtime.replica_lost); served by the replicas themselves, the connections it held
    break with it (as a killed --no-ray worker's do), at once, and those the other forwarded to it go once more.
    Either way the other replica goes on serving while Serve starts a replacement, and the time until the
    replacement answers is printed."""
    with deployed_at(serve_url, ingress, "crash", [str(tiny_models / "tiny-a")], replicas=2,
                     health_check_period_s=1) as (url, handle):
        check_crash_recovery(url, handle, retried=ingress == "serve-proxy")


def check_crash_recovery(url, handle, retried: bool):
    pids = replica_pids(handle, 2)
    outcomes, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            start = time.monotonic()
            try:
                r = translate(url, text=["hello world"] * 4, max_new_tokens=60)
                outcomes.append((r.status_code, time.monotonic() - start, r.text))
            except httpx.HTTPError as e:
                outcomes.append((0, time.monotonic() - start, repr(e)))

    workers = [threading.Thread(target=client) for _ in range(6)]
    for w in workers:
        w.start()
    time.sleep(2)
    # the replica that loaded the model: the other forwards its requests there (runtime.forwarding)
    holders = eventually(lambda: {d["pid"] for d in (handle.describe.remote().result() for _ in range(4))
                                  if d["models"]}, timeout=30)
    killed = min(holders)
    os.kill(killed, signal.SIGKILL)
    killed_at = time.monotonic()
    time.sleep(4)
    stop.set()
    for w in workers:
        w.join(60)
    failures = [o for o in outcomes if o[0] != 200]

    def replacement() -> set[int]:  # a replica that was not there before the kill answers
        from ray.exceptions import RayActorError

        try:
            return {handle.describe.remote().result(timeout_s=30)["pid"] for _ in range(4)} - pids
        except RayActorError:  # routed to the dead one before this handle's router learned it died
            return set()

    replaced = eventually(replacement, timeout=120, interval=0.2)
    print(f"{len(outcomes)} requests under load, {len(failures)} failed when the replica holding the model was "
          f"killed ({sorted({o[0] for o in failures})}); a replacement answered "
          f"{time.monotonic() - killed_at:.1f} s after the kill")
    if retried:
        assert failures == [], failures[:3]
    else:  # only the connections the killed replica held broke
        assert all(status == 0 for status, _, _ in failures), failures[:3]
    assert all(elapsed < SETTINGS.request_timeout_s for _, elapsed, _ in outcomes)
    assert replaced
    assert translate(url, text="hello", max_new_tokens=4).status_code == 200


@INGRESSES
def test_overload_under_serve_gets_503_with_retry_after(serve_url, tiny_models, ingress):
    small = Settings(dtype="float32", max_batch_rows=2, max_waiting_sequences=2, max_new_tokens=64)
    with deployed_at(serve_url, ingress, "overload", [str(tiny_models / "tiny-a")], small, replicas=1) as (url, _):

        async def burst():
            async with httpx.AsyncClient(timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{url}/v1/translate", json={
                    "text": f"hello {i}", "max_new_tokens": 60, "beam_size": 1}) for i in range(30)))

        responses = asyncio.run(burst())
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses
        assert all(r.headers.get("retry-after") for r in responses if r.status_code == 503)
        assert translate(url, text="hello", max_new_tokens=4).status_code == 200


def test_autoscaling_adds_a_replica_under_load_and_removes_it_after_losing_nothing(serve_url):
    """min 1 / max 2 replicas with short delays (runtime.autoscaling): 8 clients at once take the count (in
    /v1/models and the s2s_replicas gauge) to 2; then one client alone, streaming, whose streams go on while Serve
    removes a replica (it drains what it has), sees the count back at 1. Every request answers 200 and every
    stream ends with [DONE]."""
    from server.runtime.autoscaling import Scaling

    settings = replace(SETTINGS, max_batch_rows=2)  # target: 1 ongoing request per replica
    scaling = Scaling(1, 2, upscale_delay_s=1, downscale_delay_s=2)
    with deployed("autoscaled", [], settings, scaling=scaling):
        url = f"{serve_url}/autoscaled"
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
                    # a pause between streams: Serve keeps ceil(ongoing requests / target) replicas, and one client
                    # streaming back to back, with the polls beside it, averages just over 1
                    done.wait(0.3)

        def replicas() -> tuple[int, float]:
            listed = {m["replicas"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
            return listed.pop() if len(listed) == 1 else listed, Scrape.of(url).get("s2s_replicas", app="autoscaled")

        threads = [threading.Thread(target=streaming_client, daemon=True)]
        threads += [threading.Thread(target=client, args=(burst_over,), daemon=True) for _ in range(7)]
        for thread in threads:
            thread.start()
        try:
            # bounds, not targets: a new replica imports torch and loads the model, and under xdist the other
            # worker's tests share the two cores
            assert eventually(lambda: replicas() == (2, 2), timeout=120, interval=0.5), replicas()
            burst_over.set()  # the streaming client goes on; Serve's look-back window (30 s) sets how long this takes
            assert eventually(lambda: replicas() == (1, 1), timeout=120, interval=1), replicas()
        finally:
            burst_over.set()
            done.set()
            for thread in threads:
                thread.join(10)
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
