"""Through a real uvicorn server (python -m server --no-ray): batching invariance, join/leave, hang-ups,
overload."""

import asyncio
import json
import random
import time

import httpx
import pytest
from num2words import num2words
from server_process import Scrape, eventually, running_server, send_and_keep_open

LANGS = ["de", "fr", "es", "it"]


@pytest.fixture(scope="module")
def demo_server():
    with running_server("--no-ray", "--max-batch-rows", "64") as server:
        yield server.url


@pytest.fixture(scope="module")
def tiny_server(checkpoint):
    # A random tiny model rarely says </s>: outputs run to max_new_tokens, so lengths are under control.
    with running_server("--no-ray", "--model", str(checkpoint), "--max-batch-rows", "8",
                        "--max-waiting-sequences", "6") as server:
        yield server.url


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    # A wider, deeper random model (a few seconds per 8-beam sequence of 250 tokens here, ten times the tiny
    # one's), 8 rows and a deep queue: 64 texts of 8 beams run one after another, minutes in all.
    from marian_fixtures import build_checkpoint

    checkpoint = build_checkpoint(tmp_path_factory.mktemp("slow") / "slow", d_model=256, decoder_layers=6)
    with running_server("--no-ray", "--model", str(checkpoint), "--max-batch-rows", "8",
                        "--max-waiting-sequences", "256") as server:
        yield server.url


def metric(url: str, name: str, **labels) -> float:
    return Scrape.of(url).get(name, **labels)


def demo_requests(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    numbers = [rng.choice([rng.randint(0, 99), rng.randint(100, 9999), rng.randint(10_000, 999_999)])
               for _ in range(n)]
    return [{"text": num2words(x, lang="en"), "target_lang": LANGS[i % 4]} for i, x in enumerate(numbers)]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_64_concurrent_requests_equal_each_alone(demo_server, beam_size):
    bodies = [{**b, "beam_size": beam_size, "return_scores": True} for b in demo_requests(64, seed=beam_size)]
    with httpx.Client(base_url=demo_server, timeout=120) as client:
        alone = [client.post("/v1/translate", json=b).json()["translations"][0] for b in bodies]

    async def together():
        async with httpx.AsyncClient(base_url=demo_server, timeout=120) as client:
            responses = await asyncio.gather(*(client.post("/v1/translate", json=b) for b in bodies))
        return [r.json()["translations"][0] for r in responses]

    concurrent = asyncio.run(together())
    assert concurrent == alone  # texts and scores bit for bit (tests/model/test_batch_invariance.py)


def test_short_requests_admitted_later_finish_first(tiny_server):
    async def decoding(client) -> bool:
        return Scrape((await client.get("/metrics")).text).get("s2s_running_sequences") > 0

    async def scenario():
        async with httpx.AsyncClient(base_url=tiny_server, timeout=60) as client:
            finished = []

            async def call(name, max_new_tokens):
                await client.post("/v1/generate", json={"text": "hello world", "max_new_tokens": max_new_tokens})
                finished.append(name)

            long_task = asyncio.create_task(call("long", 250))
            deadline = time.monotonic() + 10
            while not await decoding(client) and time.monotonic() < deadline:  # until the long one decodes
                await asyncio.sleep(0.01)
            assert await decoding(client) and "long" not in finished
            await asyncio.gather(*(call(f"short{i}", 3) for i in range(4)))
            assert "long" not in finished
            await long_task
            return finished

    order = asyncio.run(scenario())
    assert order[-1] == "long" and len(order) == 5


def test_hang_ups_mid_stream_free_their_rows(tiny_server):
    async def hang_up():
        async with httpx.AsyncClient(base_url=tiny_server, timeout=30) as client:
            async with client.stream("POST", "/v1/generate",
                                     json={"text": "hello", "max_new_tokens": 250, "stream": True}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data:") and json.loads(line[5:]).get("text"):
                        return  # leave after the first piece: the connection closes

    async def run():
        await asyncio.gather(*(hang_up() for _ in range(5)))

    asyncio.run(run())
    assert eventually(lambda: metric(tiny_server, "s2s_running_sequences") == 0, timeout=10)
    assert metric(tiny_server, "s2s_kv_cache_rows_used") == 0


def test_a_hang_up_mid_batch_spares_the_other_requests(slow_server):
    """A request admitted first (row 0) hangs up while three later ones decode: its row is refilled from the tail
    and the three finish with the text each gives alone; no engine step fails."""
    url = slow_server
    bodies = [{"text": f"hello {word}", "max_new_tokens": 60, "num_beams": 1} for word in ("one", "two", "three")]
    with httpx.Client(base_url=url, timeout=60) as client:
        alone = [client.post("/v1/generate", json=b).json()["text"] for b in bodies]
    failures, before = metric(url, "s2s_engine_failures_total"), Scrape.of(url)

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            async def running(count: int) -> bool:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    if Scrape((await client.get("/metrics")).text).get("s2s_running_sequences") == count:
                        return True
                    await asyncio.sleep(0.005)
                return False

            first = send_and_keep_open(url, "/v1/generate", {"text": "hello", "max_new_tokens": 250, "num_beams": 1})
            try:
                assert await running(1), "the first request never decoded"
                others = [asyncio.create_task(client.post("/v1/generate", json=b)) for b in bodies]
                assert await running(4), "the three never decoded beside the first"
            finally:
                first.close()  # the client hangs up: the first request is cancelled
            return await asyncio.gather(*others)

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200, 200, 200], [r.text for r in responses]
    assert [r.json()["text"] for r in responses] == alone
    assert metric(url, "s2s_engine_failures_total") == failures
    assert eventually(lambda: Scrape.of(url).delta(before, "s2s_requests_total", route="/v1/generate",
                                                   status="499") == 1, timeout=10), "the first was not cancelled"


def test_hang_ups_of_non_streaming_requests_cancel_them(slow_server):
    """A client that hangs up on a plain (non-streaming) request cancels it: its running and waiting sequences
    leave at once, long before the request would have finished, and none of them finishes afterwards."""
    url = slow_server
    long = {"text": [f"hello world {i}" for i in range(64)], "beam_size": 8, "max_new_tokens": 250}
    before = Scrape.of(url)
    translation = send_and_keep_open(url, "/v1/translate", long)
    try:
        # Decoding: one sequence of 8 beams fills the batch (the rows gauge follows after its first step); the
        # others wait their turn (a request's texts are queued a window at a time, not all 64 at once).
        decoding = eventually(lambda: (s := Scrape.of(url)).get("s2s_running_sequences") == 1
                              and s.get("s2s_kv_cache_rows_used") == 8
                              and s.get("s2s_waiting_sequences") > 0 and s, timeout=10)
        assert decoding, "the long translation never started decoding"

        # A plain generation queued (no row is free), then its client hangs up: it leaves the queue. Sequences
        # ever queued = waiting now + admitted so far (one queue-wait observation each).
        def queued(s: Scrape) -> float:
            return s.get("s2s_waiting_sequences") + s.delta(before, "s2s_queue_wait_seconds_count")

        translation_queued = queued(decoding)
        generation = send_and_keep_open(url, "/v1/generate", {"text": "hello", "max_new_tokens": 250})
        assert eventually(lambda: queued(Scrape.of(url)) == translation_queued + 1, timeout=10), \
            "the generation was never queued"
        generation.close()
        assert eventually(lambda: queued(Scrape.of(url)) == translation_queued, timeout=10), \
            "the generation stayed queued"
        at_hang_up = Scrape.of(url)
        assert at_hang_up.delta(before, "s2s_requests_total", route="/v1/generate", status="499") == 1
    finally:
        translation.close()
    hung_up = time.monotonic()
    idle = eventually(lambda: (s := Scrape.of(url)).get("s2s_running_sequences") == 0
                      and s.get("s2s_waiting_sequences") == 0 and s.get("s2s_kv_cache_rows_used") == 0 and s,
                      timeout=10)
    assert idle, "the hung-up requests kept their rows"
    assert time.monotonic() - hung_up < 5  # one of 64 sequences alone takes about that long

    # Cancelled, not finished: the sequence decoding at the hang-up left the batch unfinished (a finished
    # sequence counts its output tokens and, past one step, a time per output token), the rest never ran,
    # both requests were answered 499 (to nobody) and none 200, and the server serves on.
    assert idle.delta(at_hang_up, "s2s_output_tokens_total") == 0
    assert idle.delta(at_hang_up, "s2s_time_per_output_token_seconds_count") == 0
    assert idle.delta(at_hang_up, "s2s_queue_wait_seconds_count") == 0
    assert 1 <= idle.delta(before, "s2s_queue_wait_seconds_count") < 64 / 2
    assert idle.delta(before, "s2s_requests_total", route="/v1/translate", status="499") == 1
    assert idle.delta(before, "s2s_requests_total", route="/v1/translate", status="200") == 0
    assert idle.delta(before, "s2s_requests_total", route="/v1/generate", status="200") == 0
    ok = httpx.post(f"{url}/v1/translate", json={"text": "hello", "max_new_tokens": 5}, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["output_tokens"] > 0


def test_overload_gets_503_with_retry_after_and_accepted_requests_complete(tiny_server):
    async def burst():
        async with httpx.AsyncClient(base_url=tiny_server, timeout=60) as client:
            return await asyncio.gather(*(client.post("/v1/generate", json={"text": f"hello {i}",
                                                                           "max_new_tokens": 250})
                                          for i in range(40)))

    start = time.monotonic()
    responses = asyncio.run(burst())
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 503}
    rejected = [r for r in responses if r.status_code == 503]
    assert rejected and statuses.count(200) >= 6  # at least the queue's capacity is accepted
    assert all(r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "queue_full" for r in rejected)
    assert all(r.json()["finish_reason"] in ("eos", "length") for r in responses if r.status_code == 200)
    assert time.monotonic() - start < 60
    assert httpx.get(tiny_server + "/readyz").status_code == 200


@pytest.mark.parametrize("body,status,field", [
    ({"text": ["a"] * 65}, 422, "text"),
    ({"text": "hello " * 300, "split_sentences": "0"}, 422, "text"),  # kept whole: over max_input_tokens
    ({"text": "a", "beam_size": 40}, 422, "beam_size"),
    ({"text": "a", "target_lang": "xx"}, 422, "target_lang"),
    ({"text": "a", "model": "nope"}, 404, "model"),
])
def test_4xx_through_the_real_server(tiny_server, body, status, field):
    response = httpx.post(f"{tiny_server}/v1/translate", json=body, timeout=30)
    assert response.status_code == status and response.json()["error"]["field"] == field


def test_bad_bodies_and_streaming_through_the_real_server(tiny_server):
    headers = {"content-type": "application/json"}
    assert httpx.post(f"{tiny_server}/v1/translate", content=b'{"text":', headers=headers).status_code == 400
    assert httpx.post(f"{tiny_server}/v1/translate", content=b'{"text": "\xff"}', headers=headers).status_code == 400
    assert httpx.post(f"{tiny_server}/v1/translate", content=b"x" * 2_000_000, headers=headers).status_code == 413
    body = {"text": "hello world", "max_new_tokens": 20}
    whole = httpx.post(f"{tiny_server}/v1/generate", json=body, timeout=30).json()
    with httpx.stream("POST", f"{tiny_server}/v1/generate", json={**body, "stream": True}, timeout=30) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "".join(e["text"] for e in events) == whole["text"] and events[-1]["usage"] == whole["usage"]


def test_an_included_router_shows_its_route_template_to_middleware():
    """Settles whether FastAPI's include_router hides the route template from ASGI middleware (RequestMetrics
    labels requests by `scope["route"].path`): it does not, so each API may be an APIRouter of its own."""
    from fastapi import APIRouter, FastAPI
    from fastapi.testclient import TestClient

    templates = []

    class RouteOf:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            await self.app(scope, receive, send)
            if scope["type"] == "http":
                templates.append(scope["route"].path)

    router = APIRouter(prefix="/v9")

    @router.get("/items/{name}")
    async def item(name: str):
        return {"name": name}

    app = FastAPI()
    app.include_router(router)
    app.add_middleware(RouteOf)
    with TestClient(app) as client:
        assert client.get("/v9/items/abc").json() == {"name": "abc"}
    assert templates == ["/v9/items/{name}"]
