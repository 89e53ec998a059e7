"""runtime.replica_lost without Ray: Serve's proxy with the middleware around it (a stand-in proxy whose replicas
die before answering as often as a test says: as Serve's does, it then returns having sent nothing), and the policy
over a stream, as runtime.forwarding applies it."""

import asyncio
import contextlib

import httpx
import pytest

from server.front.streams import opened
from server.runtime.replica_lost import ReplicaLost, RetryAfterOn503, RetryLostReplica, once_more_if_lost


class DyingProxy:
    """Reads the request's body, then its replica dies `deaths` times; after that it answers with the body it read,
    `answer_after_s` late."""

    def __init__(self, deaths: int, answer_after_s: float = 0.0):
        self.deaths, self.answer_after_s, self.bodies = deaths, answer_after_s, []

    async def __call__(self, scope, receive, send):
        body = (await receive())["body"]
        self.bodies.append(body)
        if len(self.bodies) <= self.deaths:
            return
        await asyncio.sleep(self.answer_after_s)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def post(proxy: DyingProxy, timeout_s: float = 60, path: str = "/v1/translate") -> httpx.Response:
    async def request():
        transport = httpx.ASGITransport(app=RetryLostReplica(proxy, timeout_s=timeout_s))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return await client.post(path, content=b'{"text": "hello"}')

    return asyncio.run(request())


def test_a_request_whose_replica_died_is_sent_once_more_with_its_body():
    proxy = DyingProxy(deaths=1)
    response = post(proxy)
    assert (response.status_code, response.content) == (200, b'{"text": "hello"}')
    assert proxy.bodies == [b'{"text": "hello"}'] * 2


def test_a_second_death_or_a_retry_past_the_timeout_answers_503_with_retry_after():
    for proxy, timeout_s in ((DyingProxy(deaths=2), 60), (DyingProxy(deaths=1, answer_after_s=5), 0.2)):
        response = post(proxy, timeout_s)
        assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
        assert response.json()["error"]["code"] == "engine_failed"
        assert len(proxy.bodies) == 2  # once retried, never more


def test_serves_own_503_gets_retry_after_and_ours_keep_theirs():
    async def answer(status: int, headers: list):
        async def proxy(scope, receive, send):
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b""})

        transport = httpx.ASGITransport(app=RetryAfterOn503(proxy))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return (await client.get("/v1/models")).headers.get_list("retry-after")

    assert asyncio.run(answer(503, [])) == ["1"]  # Serve's "no replica" answer
    assert asyncio.run(answer(503, [(b"Retry-After", b"7")])) == ["7"]
    assert asyncio.run(answer(200, [])) == []


def test_a_request_that_stores_something_is_not_sent_again():
    """The dead replica may have stored the glossary or the document job already: the client decides."""
    for path in ("/app/v2/glossaries", "/v3/glossaries/abc/dictionaries", "/v2/document", "/v1/documents"):
        proxy = DyingProxy(deaths=1)
        response = post(proxy, path=path)
        assert response.status_code == 503 and response.headers["retry-after"] == "1", (path, response.text)
        assert len(proxy.bodies) == 1, path
    proxy = DyingProxy(deaths=1)
    assert post(proxy, path="/app/translate").status_code == 200 and len(proxy.bodies) == 2  # LibreTranslate's


def test_a_stream_goes_once_more_only_if_its_replica_died_before_its_first_event():
    async def stream(attempts: list, lost_after: int | None):
        attempts.append(1)
        for i in range(3):
            if len(attempts) == 1 and i == lost_after:
                raise ReplicaLost("the replica serving this request died; retry")
            yield i

    async def events(lost_after: int | None) -> tuple[list, list]:
        attempts, received = [], []
        opening = await once_more_if_lost(lambda _: opened(stream(attempts, lost_after)), 60,
                                          asyncio.get_running_loop().time())
        with pytest.raises(ReplicaLost) if lost_after else contextlib.nullcontext():
            async for event in opening:
                received.append(event)
        return attempts, received

    assert asyncio.run(events(lost_after=0)) == ([1, 1], [0, 1, 2])  # lost before anything: sent once more
    assert asyncio.run(events(lost_after=2)) == ([1], [0, 1])  # lost mid-stream: its client has part of it


def test_routes_declare_what_may_be_sent_again():
    """A route marked resendable (its answer computed from the request alone) and every read may go once more, under
    a route prefix too; a route that stores something may not, nor a path no route serves."""
    from server.api.app import resending
    from server.settings import Settings

    rule = resending(Settings())

    def allows(method: str, path: str) -> bool:
        return rule.allows({"type": "http", "method": method, "path": path, "root_path": ""})

    assert all(allows("POST", path) for path in (
        "/v1/translate", "/v1/translate/file", "/v1/generate", "/v1/completions", "/v1/chat/completions",
        "/translate", "/detect", "/translate_file", "/languages", "/v2/translate", "/v2/languages", "/v2/usage",
        "/app/v1/translate"))
    assert allows("GET", "/v1/models") and allows("GET", "/v1/documents/ABC/result")
    assert not any(allows(method, path) for method, path in (
        ("POST", "/v1/glossaries"), ("PATCH", "/v1/glossaries/g"), ("DELETE", "/v1/glossaries/g"),
        ("POST", "/v1/documents"), ("POST", "/v2/document"), ("POST", "/v2/document/ABC/result"),
        ("POST", "/v2/glossaries"), ("POST", "/v3/glossaries"), ("POST", "/v1/nothing")))


class DeadReplicaHandle:
    """A DeploymentHandle whose router keeps picking the replica "dead" (it holds the model) and whose calls to it
    fail as a killed actor's do."""

    def __init__(self):
        self.chosen = 0

    def options(self, **_):
        return self

    @contextlib.asynccontextmanager
    async def choose_replica(self, job):
        self.chosen += 1
        yield type("Selection", (), {"replica_id": "dead"})()

    def dispatch(self, selection, job):
        return DeadReply()


class DeadReply:
    """A call's answer from a killed replica, unary (awaited) or streamed (iterated)."""

    def __await__(self):
        return self.__anext__().__await__()

    def __aiter__(self):
        return self

    async def __anext__(self):
        from ray.exceptions import ActorUnavailableError

        raise ActorUnavailableError("the actor's process is gone", None)

    def cancel(self):
        pass


def test_a_forwarded_job_whose_replica_died_goes_once_more_here():
    """A replica forwards a job for a model it does not hold; the replica holding it dies: the job goes once more,
    to this replica (alive), not back through a router that may pick the dead one again."""
    from server.runtime.forwarding import RemoteModel

    class Held:
        async def translate(self, job):
            return f"translated here: {job}"

        async def generate_events(self, job):
            yield f"generated here: {job}"

    async def run():
        handle = DeadReplicaHandle()
        remote = RemoteModel(handle, "tiny", "this", lambda name: asyncio.sleep(0, Held()), timeout_s=60)
        answer = await remote.translate("job")
        events = [event async for event in remote.generate_events("job")]
        return answer, events, handle.chosen

    assert asyncio.run(run()) == ("translated here: job", ["generated here: job"], 2)
