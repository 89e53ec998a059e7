"""Through a real uvicorn server (python -m server --no-ray): batching invariance, join/leave, hang-ups,
overload."""

import asyncio
import json
import random
import re
import time

import httpx
import pytest
from num2words import num2words
from server_process import running_server

LANGS = ["de", "fr", "es", "it"]


@pytest.fixture(scope="module")
def demo_server():
    with running_server("--no-ray", "--max-batch-rows", "64") as server:
        yield server.url


@pytest.fixture(scope="module")
def tiny_server(checkpoint):
    # A random tiny model rarely says </s>: outputs run to max_new_tokens, so lengths are under control.
    with running_server("--no-ray", "--model", str(checkpoint), "--max-batch-rows", "8",
                        "--max-queued-requests", "6") as server:
        yield server.url


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


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
    assert [t["text"] for t in concurrent] == [t["text"] for t in alone]
    for c, a in zip(concurrent, alone):
        assert c["score"] == pytest.approx(a["score"], abs=1e-4)


def test_short_requests_admitted_later_finish_first(tiny_server):
    async def scenario():
        async with httpx.AsyncClient(base_url=tiny_server, timeout=60) as client:
            finished = []

            async def call(name, max_new_tokens):
                await client.post("/v1/generate", json={"text": "hello world", "max_new_tokens": max_new_tokens})
                finished.append(name)

            long_task = asyncio.create_task(call("long", 250))
            await asyncio.sleep(0.3)  # the long request is decoding
            assert "long" not in finished
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
    deadline = time.monotonic() + 10
    while metric(tiny_server, "s2s_running_sequences") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(tiny_server, "s2s_running_sequences") == 0
    assert metric(tiny_server, "s2s_kv_cache_rows_used") == 0


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
    ({"text": "hello " * 300}, 422, "text"),
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
