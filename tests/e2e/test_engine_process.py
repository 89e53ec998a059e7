"""A model's engine in a process of its own (server.runtime.engine_process, the default on the CPU): the same
answers as an engine in the server's process, backpressure counted exactly across the pipe, and an engine
process that dies costs only the requests it held."""

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from server_process import Scrape, eventually, in_process_client, running_server

from server.errors import QueueFull
from server.engine.sequence import FinalOutput
from server.settings import Settings

BODIES = [
    ("/v1/translate", {"text": ["one hundred and seven", "forty-two. Seven thousand!"], "target_lang": "de"}),
    ("/v1/translate", {"text": "twelve", "target_lang": "fr", "beam_size": 3, "n_best": 2}),
    ("/v1/translate", {"text": "<p>one <b>hundred</b> and seven</p>", "target_lang": "es", "format": "html"}),
    ("/v1/generate", {"text": "three hundred", "target_lang": "it", "max_new_tokens": 12}),
    ("/translate", {"q": ["nine", "ninety"], "source": "en", "target": "fr"}),
]


ENGINE_METRICS = ("s2s_output_tokens_total", "s2s_input_tokens_total", "s2s_queue_wait_seconds_count")


def answers(settings: Settings) -> tuple[list, list[str], list[float]]:
    """The answers to BODIES and a stream's events, and what they added to the engine's metrics."""
    with in_process_client(settings, engines_here=False) as client:
        metrics = Scrape(client.get("/metrics").text)
        bodies = [client.post(path, json=body) for path, body in BODIES]
        with client.stream("POST", "/v1/generate", json={"text": "eighty-one", "target_lang": "de",
                                                         "stream": True}) as stream:
            events = [line for line in stream.iter_lines() if line]
        added = [Scrape(client.get("/metrics").text).delta(metrics, name) for name in ENGINE_METRICS]
        return [(r.status_code, r.json()) for r in bodies], events, added


def test_answers_equal_those_of_an_engine_in_the_server_process():
    """Every route, beams and n-best, inline markup (its word alignment is the engine process's), streaming: the
    same bytes either way; the engine's metrics reach the server's /metrics."""
    before = answers(Settings(dtype="float32", engine_process=False))
    after = answers(Settings(dtype="float32", engine_process=True))
    assert after[0] == before[0] and all(status == 200 for status, _ in after[0])
    assert after[1] == before[1] and len(after[1]) > 1
    assert after[2] == before[2] and min(after[2]) > 0


@pytest.fixture
def engine_process(checkpoint):
    """The tiny model's engine in a child process: one row, room for three waiting sequences."""
    from model import load
    from server.runtime.engine_process import EngineProcess
    from server.front.registry import model_limits

    bundle = load(str(checkpoint), weights=False)
    settings = model_limits(Settings(dtype="float32", max_batch_rows=1, max_waiting_sequences=3), bundle.max_positions)
    engine = EngineProcess(str(checkpoint), settings, "tiny", threads=1)
    try:
        yield engine, bundle
    finally:
        engine.stop()


def test_backpressure_counts_what_waits_across_the_pipe(engine_process):
    """The queue limit holds for sequences the engine process has not admitted yet; those cancelled while
    waiting, and those admitted, give their place back."""
    engine, bundle = engine_process
    params = bundle.decode_params(num_beams=1, max_new_tokens=200)
    ids = bundle.source("hello world", None, None).ids

    async def scenario():
        running, = engine.submit([(ids, params)], stream=True)
        outputs = engine.outputs(*running)
        await anext(outputs)  # decoding: the one row is taken
        waiting = engine.submit([(ids, params)] * 3)
        with pytest.raises(QueueFull):
            engine.submit([(ids, params)])
        engine.cancel(waiting[0][0], waiting[1][0])
        assert eventually(lambda: engine.queued.value == 1, timeout=5)
        more = engine.submit([(ids, params)] * 2)
        with pytest.raises(QueueFull):
            engine.submit([(ids, params)])
        await outputs.aclose()  # the running one is cancelled: the oldest waiting one is admitted
        assert eventually(lambda: engine.queued.value == 2, timeout=5)
        engine.cancel(*(request for request, _ in waiting + more))
        assert eventually(lambda: engine.queued.value == 0, timeout=5)
        short = bundle.decode_params(num_beams=1, max_new_tokens=3)
        finals = []
        for request, queue in engine.submit([(ids, short)] * 3):
            async for output in engine.outputs(request, queue):
                if isinstance(output, FinalOutput):
                    finals.append(output.hypotheses[0].token_ids)
        return finals

    finals = asyncio.run(scenario())
    assert len(finals) == 3 and finals[0] == finals[1] == finals[2] and len(finals[0]) <= 3
    assert engine.queued.value == 0


def test_the_server_side_keeps_each_sequence_status_and_a_failing_delivery_cancels_only_its_own(engine_process):
    """The server's Sequence objects get their final status on this side (the engine process reports only
    outputs); a delivery that raises (its event loop is gone) cancels that sequence alone, and its row and its
    place in the queue go to the next one."""
    import threading

    from server.engine.sequence import Sequence, Status

    engine, bundle = engine_process
    ids = bundle.source("hello world", None, None).ids
    finished = threading.Event()

    def broken(output):
        raise RuntimeError("Event loop is closed")

    bad = Sequence(ids, bundle.decode_params(num_beams=1, max_new_tokens=200), broken)
    good = Sequence(ids, bundle.decode_params(num_beams=1, max_new_tokens=3),
                    lambda output: isinstance(output, FinalOutput) and finished.set())
    engine.add([bad, good])  # one row: bad decodes first, good waits for its row
    assert finished.wait(30), "the healthy sequence never finished"
    assert (bad.status, good.status) == (Status.CANCELLED, Status.FINISHED)
    assert not engine.unfinished and engine.queued.value == 0


def engine_pid(server_pid: int) -> int | None:
    """The server's engine process (one of its children: multiprocessing's resource tracker is another)."""
    children = [int(pid) for task in Path(f"/proc/{server_pid}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    engines = [pid for pid in children if Path(f"/proc/{pid}/comm").read_text().strip() == "s2s-engine"]
    return engines[0] if engines else None


def test_a_killed_engine_process_fails_its_requests_and_another_takes_over(checkpoint):
    """SIGKILL to the engine process mid-batch (as the kernel's out-of-memory killer would): the requests it held
    get 503 engine_failed with Retry-After, the server stays up, health fails until a new engine process has
    loaded the model, and then requests are answered as before."""
    body = {"text": "hello world", "max_new_tokens": 200}
    with running_server("--no-ray", "--model", str(checkpoint), "--health-stale-s", "1") as server:
        first = engine_pid(server.proc.pid)
        alone = httpx.post(server.url + "/v1/generate", json=body, timeout=30).json()["text"]

        async def scenario():
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                held = [asyncio.create_task(client.post("/v1/generate", json={**body, "text": f"hello {i}"}))
                        for i in range(3)]
                deadline = time.monotonic() + 10
                while Scrape((await client.get("/metrics")).text).get("s2s_running_sequences") < 3:
                    assert time.monotonic() < deadline, "the three requests never decoded"
                    await asyncio.sleep(0.005)
                os.kill(first, signal.SIGKILL)
                return await asyncio.gather(*held)

        failed = asyncio.run(scenario())
        assert [r.status_code for r in failed] == [503] * 3, [r.text for r in failed]
        assert all(r.json()["error"]["code"] == "engine_failed" and r.headers["retry-after"] == "1" for r in failed)
        assert httpx.get(server.url + "/healthz").status_code == 503  # a new one is loading
        assert eventually(lambda: engine_pid(server.proc.pid) not in (None, first), timeout=30)
        assert eventually(lambda: httpx.get(server.url + "/healthz").status_code == 200, timeout=30)
        again = httpx.post(server.url + "/v1/generate", json=body, timeout=30)
        assert again.status_code == 200 and again.json()["text"] == alone
        assert server.proc.poll() is None
        assert Scrape.of(server.url).get("s2s_engine_failures_total") == 1
