"""Ray Serve, really started on 127.0.0.1 (tests/e2e/conftest.py): replicas, text-to-text families and translation
families side by side, multiplexing with LRU eviction, the compatible APIs, streaming and metrics across replicas.

HTTP reaches an application either through Serve's proxy (below its route prefix) or, as `python -m server`
serves it by default, from its replicas themselves, on a port of its own (`replica_http`)."""

import asyncio
import json
import time
from dataclasses import replace

import httpx
import pytest
from ray_serve_apps import (
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
    within_one_minute,
)

from server.settings import Settings


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


def test_replicas_serve_http_on_one_port(serve_url, metrics_dir):
    """replica_http: both replicas of the application accept connections on its port (the kernel spreads them),
    answer alike, and the port's /metrics sums the node's replicas."""
    with deployed_at(serve_url, "replica-http", "onport", [], replicas=2) as (url, handle):
        pids = replica_pids(handle, 2)
        before = Scrape.of(url)
        responses = [translate(url, text="forty-two", target_lang="fr") for _ in range(40)]  # a connection each
        assert {(r.status_code, r.json()["translations"][0]["text"]) for r in responses} == {(200, "quarante-deux")}
        served = {pid: process_scrape(metrics_dir, pid).get("s2s_requests_total", route="/v1/translate",
                                                            status="200") for pid in pids}
        assert all(served.values()) and sum(served.values()) == 40, served
        after = Scrape.of(url)
        assert after.delta(before, "s2s_requests_total", route="/v1/translate", status="200") == 40


def test_two_replicas_share_one_keys_rate_limit_exactly(serve_url, metrics_dir, tmp_path):
    """The replicas of a node count a key's requests in one key store: 5 a minute admits 5, not 5 per replica."""
    settings = replace(SETTINGS, api_keys=("ray-key",), rate_limit_per_minute=5,
                       key_store=str(tmp_path / "keys.sqlite"))
    with deployed_at(serve_url, "replica-http", "keyed", [], settings, replicas=2) as (url, handle):
        pids = replica_pids(handle, 2)
        within_one_minute(20)
        statuses = [httpx.post(f"{url}/v1/translate", json={"text": "seven", "target_lang": "de"}, timeout=60,
                               headers={"Authorization": "Bearer ray-key"}).status_code for _ in range(16)]
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
        return s.delta(before, "s2s_output_tokens_total") >= usage["output_tokens"] and s

    after = eventually(caught_up, timeout=10)
    assert after, "the output tokens never reached /metrics"
    assert after.delta(before, "s2s_requests_total", route="/v1/generate", status="200") == 1
    assert after.delta(before, "s2s_request_latency_seconds_count", route="/v1/generate") == 1
    assert after.delta(before, "s2s_requests_total", route="/metrics", status="200") == len(polls)  # earlier ones
    assert after.delta(before, "s2s_input_tokens_total") == usage["input_tokens"]
    assert after.delta(before, "s2s_output_tokens_total") == usage["output_tokens"]
    assert after.delta(before, "s2s_queue_wait_seconds_count") == 1
    assert after.delta(before, "s2s_time_to_first_token_seconds_count") == 1
    steps = after.delta(before, "s2s_engine_step_seconds_count")
    assert steps >= 1 and after.delta(before, "s2s_batch_rows_count") == steps
    assert all(after.get(g) == 0 for g in ("s2s_running_sequences", "s2s_waiting_sequences",
                                           "s2s_kv_cache_rows_used"))
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
    assert deployments == {"ModelServer"}, deployments


def test_multiplexing_routes_models_and_evicts_least_recently_used(serve_url, tiny_models):
    with deployed("lru", [str(tiny_models)], replicas=1, max_models_per_replica=2) as handle:
        check_lru(f"{serve_url}/lru", handle)


def check_lru(url, handle):
    for name in ("tiny-a", "tiny-b", "tiny-a", "tiny-c"):
        response = translate(url, text="hello world", model=name, max_new_tokens=4)
        assert response.status_code == 200 and response.json()["model"] == name
    assert sorted(handle.describe.remote().result()["models"]) == ["tiny-a", "tiny-c"]  # tiny-b was the LRU
    assert translate(url, text="hello", model="nope").status_code == 404


def test_streams_for_a_model_the_replica_is_loading_all_finish(serve_url, tiny_models):
    """Streams ask, four at a time, for the model the replica does not hold (one model per replica, two models
    taken in turn), so Serve's multiplexing routes them, and it picks this same replica: a stream forwarded over
    a handle back to its own replica stalled midway (Ray 2.60). Each must end with its final event and [DONE]."""

    async def stream(client, model: str) -> list[str]:
        body = {"text": "hello world", "model": model, "stream": True, "max_new_tokens": 16}
        async with client.stream("POST", f"{serve_url}/restream/v1/generate", json=body) as response:
            assert response.status_code == 200
            return [line async for line in response.aiter_lines() if line.startswith("data: ")]

    async def turns(handle):
        async with httpx.AsyncClient(timeout=20) as client:
            for turn in range(4):  # each turn loads the other model in place of the last
                model = ("tiny-a", "tiny-b")[turn % 2]
                for events in await asyncio.gather(*(stream(client, model) for _ in range(4))):
                    assert events[-1] == "data: [DONE]" and '"finish_reason"' in events[-2], (turn, events)
                assert (await handle.describe.remote())["models"] == [model]

    with deployed("restream", [str(tiny_models)], replicas=1, max_models_per_replica=1) as handle:
        asyncio.run(turns(handle))


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
