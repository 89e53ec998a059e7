"""What a process serving HTTP itself does about its connections (runtime.connections): kept-alive connections
age out so that clients spread over the processes sharing the port, and a request the drain cuts answers 503."""

import asyncio
import threading
import time

import httpx
from fastapi import FastAPI
from server_process import free_port

from server.runtime.connections import AnswerCutRequests, ConnectionAgeLimit
from server.runtime.listen import uvicorn_server
from server.settings import Settings


async def ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def answer(app, client=("127.0.0.1", 5000), path="/v1/translate") -> list[dict]:
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(app({"type": "http", "client": client, "path": path, "root_path": ""}, receive, send))
    return sent


def test_a_connection_past_its_age_is_answered_connection_close_once():
    now = [0.0]
    app = ConnectionAgeLimit(ok, max_age_s=10, clock=lambda: now[0])
    closes = []
    for at, client in ((0, 1), (5, 1), (10, 1), (10.5, 1), (10.5, 2)):
        now[0] = at
        closes.append((b"connection", b"close") in answer(app, ("127.0.0.1", client))[0]["headers"])
    # client 1's connection at 10 s is closed; its next request came on a new connection, client 2's is new
    assert closes == [False, False, True, False, False]


def test_a_request_cut_by_the_drain_answers_503_with_retry_after():
    settings = Settings(port=free_port(), drain_timeout_s=0.5)
    app = FastAPI()
    started = threading.Event()

    @app.post("/v1/translate")
    async def forever():
        started.set()
        await asyncio.sleep(60)

    server = uvicorn_server(app, settings)
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    while not server.started:
        time.sleep(0.05)
    answers = []
    client = threading.Thread(target=lambda: answers.append(
        httpx.post(f"http://127.0.0.1:{settings.port}/v1/translate", json={}, timeout=30)))
    client.start()
    assert started.wait(10)
    server.should_exit = True
    client.join(30)
    serving.join(30)
    (response,) = answers
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "shutting_down"


def test_other_cancellations_and_started_responses_pass_on():
    async def cancelled(scope, receive, send):
        raise asyncio.CancelledError

    async def started_then_cancelled(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise asyncio.CancelledError

    for app, draining in ((cancelled, False), (started_then_cancelled, True)):
        try:
            answer(AnswerCutRequests(app, draining=lambda: draining))
        except asyncio.CancelledError:
            continue
        raise AssertionError("the cancellation was swallowed")
