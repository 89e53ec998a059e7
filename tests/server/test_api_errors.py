"""Every 4xx path through FastAPI's TestClient: JSON naming the field, the problem and the limit."""

import json
import pickle
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from server_process import Scrape, eventually, in_process_client

from server.api import create_app
from server.errors import (SamplingNeedsOneBeam, TextTooLong, TooManyBeams, TooManyCharacters, TooManySentences,
                           TooManyTexts, TooManyTokens)
from server.runtime.local import LocalModels
from server.front.registry import ModelRegistry
from server.settings import Settings

SETTINGS = Settings(dtype="float32", max_input_tokens=32, max_new_tokens=40, max_beams=6, max_texts=8,
                    max_body_bytes=30000, max_batch_rows=16, max_document_chars=20000)


@pytest.fixture(scope="module")
def client(checkpoint):
    with in_process_client(SETTINGS, [str(checkpoint)]) as c:
        yield c


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    return error


@pytest.mark.parametrize("body,field,limit", [
    ({"text": ["a"] * 9}, "text", 8),
    ({"text": ["a"] * 65}, "text", 8),
    ({"text": []}, "text", 1),
    ({"text": ["ok", 5]}, "text[1]", None),
    ({"text": "x" * 20001}, "text[0]", 20000),
    ({"text": "hello " * 40, "split_sentences": "0"}, "text", 32),  # one unit: not cut into pieces that fit
    ({"text": ["fine", "hello " * 40], "split_sentences": "0"}, "text[1]", 32),
    ({"text": "a", "beam_size": 17}, "beam_size", 6),
    ({"text": "a", "n_best": 7}, "n_best", 6),
    ({"text": "a", "beam_size": 0}, "beam_size", 1),
    ({"text": "a", "beam_size": 7}, "beam_size", 6),
    ({"text": "a", "max_new_tokens": 41}, "max_new_tokens", 40),
    ({"text": "a", "max_new_tokens": 0}, "max_new_tokens", 1),
    ({"text": "a", "beam_size": 2, "n_best": 3}, "n_best", 2),
    ({"text": "a", "length_penalty": "nan"}, "length_penalty", None),
    ({"text": "a", "unknown": 1}, "unknown", None),
    ({"text": "a", "target_lang": "xx"}, "target_lang", ["de", "fr"]),
])
def test_translate_rejections(client, body, field, limit):
    error = error_of(client.post("/v1/translate", json=body), 422)
    assert error["field"] == field
    assert error.get("limit") == limit


def test_target_lang_error_names_the_languages(client):
    error = error_of(client.post("/v1/translate", json={"text": "a", "target_lang": "xx"}), 422)
    assert "de, fr" in error["message"]


def test_unknown_model(client):
    error = error_of(client.post("/v1/translate", json={"text": "a", "model": "nope"}), 404)
    assert error["field"] == "model" and "available" in error["message"]


@pytest.mark.parametrize("body,field", [
    ({"text": "a", "temperature": 0}, "temperature"),
    ({"text": "a", "top_p": 1.5}, "top_p"),
    ({"text": "a", "top_k": -1}, "top_k"),
    ({"text": "a", "num_beams": 3, "temperature": 0.7}, "num_beams"),
    ({"text": "a", "stop": ["x"] * 17}, "stop"),
    ({"text": "a", "seed": -1}, "seed"),
    ({"text": 5}, "text"),
])
def test_generate_rejections(client, body, field):
    assert error_of(client.post("/v1/generate", json=body), 422)["field"] == field


@pytest.mark.parametrize("min_new_tokens", [41, 2**63])  # 2**63: past the engine's int64 (found by the fuzz test)
def test_min_new_tokens_above_the_token_limit_is_refused(client, min_new_tokens):
    error = error_of(client.post("/v1/generate", json={"text": "a", "min_new_tokens": min_new_tokens}), 422)
    assert (error["field"], error["limit"]) == ("min_new_tokens", 40)
    assert client.post("/v1/generate", json={"text": "a", "min_new_tokens": 40}).status_code == 200


def test_invalid_json_utf8_and_size(client):
    headers = {"content-type": "application/json"}
    assert error_of(client.post("/v1/translate", content=b'{"text": "a"', headers=headers), 400)["field"] == "body"
    for path in ("/v1/translate", "/v1/generate"):  # NUL bytes: json.loads takes them for UTF-32 and cannot decode
        assert error_of(client.post(path, content=b"\x00" * 5, headers=headers), 400)["field"] == "body"
    bad_utf8 = client.post("/v1/translate", content=b'{"text": "\xff\xfe"}', headers=headers)
    assert "UTF-8" in error_of(bad_utf8, 400)["message"]
    big = client.post("/v1/translate", json={"text": "a" * 40000})
    assert error_of(big, 413)["limit"] == 30000
    assert client.get("/readyz").status_code == 200  # the server is unharmed


def routes(app_routes):
    """Every route of the app, through the routers it includes."""
    for route in app_routes:
        included = getattr(route, "original_router", None)  # FastAPI keeps an included router whole
        yield from routes(included.routes) if included is not None else [route]


@pytest.mark.slow
def test_json_nested_100000_deep_is_a_4xx_on_every_route(checkpoint):
    """json.loads raises RecursionError, not ValueError, past ~1,000 levels: it was a 500 on every compatible
    route and on the glossary routes."""
    depth = 100_000  # 200-500 kB: within the default body limit
    bodies = (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth)
    with in_process_client(Settings(dtype="float32"), [str(checkpoint)]) as client:
        answered = nested_answers(client, bodies)
        assert client.get("/readyz").status_code == 200
    reads_no_body = {("POST", "/languages")}  # LibreTranslate's languages list: the body is not read
    assert {key for key, status in answered.items() if not 400 <= status < 500} == reads_no_body, answered
    assert {"/v2/translate", "/translate", "/detect", "/v1/chat/completions"} <= {path for _, path in answered}


def nested_answers(client, bodies) -> dict[tuple[str, str], int]:
    answered = {}
    for route in routes(client.app.routes):
        for method in getattr(route, "methods", set()) & {"POST", "PUT", "PATCH"}:
            path = route.path.replace("{glossary_id}", "g1")
            for body in bodies:
                response = client.request(method, path, content=body, headers={"content-type": "application/json"})
                answered[method, path] = response.status_code
                assert response.json()  # an error body in the route's API's shape, not a bare 500 page
    return answered


def test_streaming_equals_non_streaming(client):
    body = {"text": "the quick brown fox", "max_new_tokens": 30}
    whole = client.post("/v1/generate", json=body).json()
    with client.stream("POST", "/v1/generate", json={**body, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert "".join(e["text"] for e in events) == whole["text"]
    assert events[-1]["finish_reason"] == whole["finish_reason"]
    assert events[-1]["usage"] == whole["usage"]


def test_stop_strings_cut_the_output(client):
    full = client.post("/v1/generate", json={"text": "hello world", "max_new_tokens": 30}).json()["text"]
    assert len(full) > 4
    stop = full[2:4]
    cut = client.post("/v1/generate", json={"text": "hello world", "max_new_tokens": 30, "stop": [stop]}).json()
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == full[: full.index(stop)]


def test_models_and_health(client):
    card = client.get("/v1/models").json()["data"][0]
    assert card["languages"] == ["de", "fr"] and card["limits"]["max_texts"] == 8
    assert client.get("/healthz").status_code == 200


def scrape(client) -> Scrape:
    response = client.get("/metrics")
    assert response.status_code == 200
    return Scrape(response.text)


def test_metric_values_move_with_the_requests_made(client):
    """Not just names (prometheus-client prints every HELP/TYPE line at import): the values change by exactly
    what a known set of requests did, as the responses themselves report it."""
    translations = [{"text": "hello world", "max_new_tokens": 6},
                    {"text": ["the quick brown fox", "jumps", "  "], "max_new_tokens": 5, "target_lang": "fr"},
                    {"text": "hello", "beam_size": 3, "n_best": 2, "max_new_tokens": 4}]
    sequences = 1 + 2 + 1 + 1  # the blank text is never decoded; the generation below is the fifth
    before = scrape(client)
    timed = []  # (route, seconds as the client saw them, response)
    calls = [*(("/v1/translate", body) for body in translations), ("/v1/translate", {"text": "a", "beam_size": 0}),
             ("/v1/generate", {"text": "hello world", "max_new_tokens": 7})]
    for path, body in calls:
        start = time.monotonic()
        response = client.post(path, json=body)
        timed.append((path, time.monotonic() - start, response))
    assert [r.status_code for _, _, r in timed] == [200, 200, 200, 422, 200]
    usage = [r.json()["usage"] for _, _, r in timed if r.status_code == 200]
    input_tokens = sum(u["input_tokens"] for u in usage)
    output_tokens = sum(u["output_tokens"] for u in usage)  # of the best hypotheses: /v1/translate's usage
    assert input_tokens > 0 and output_tokens > 0

    # The engine thread records a finished sequence's tokens just after handing its result over: poll briefly.
    polls = []

    def caught_up():
        polls.append(s := scrape(client))
        return (s.delta(before, "s2s_output_tokens_total") >= output_tokens
                and s.delta(before, "s2s_time_to_first_token_seconds_count") >= sequences and s)

    after = eventually(caught_up, timeout=5)
    assert after, "the token and first-token metrics never caught up with the requests"

    requests = "s2s_requests_total"
    assert after.delta(before, requests, route="/v1/translate", status="200") == 3
    assert after.delta(before, requests, route="/v1/translate", status="422") == 1
    assert after.delta(before, requests, route="/v1/generate", status="200") == 1
    assert after.delta(before, requests, route="/metrics", status="200") == len(polls)  # `before`, earlier polls

    assert after.delta(before, "s2s_input_tokens_total") == input_tokens
    assert after.delta(before, "s2s_output_tokens_total") == output_tokens
    assert after.delta(before, "s2s_queue_wait_seconds_count") == sequences
    assert after.delta(before, "s2s_time_to_first_token_seconds_count") == sequences
    assert 0 <= after.delta(before, "s2s_time_per_output_token_seconds_count") <= sequences
    steps = after.delta(before, "s2s_engine_step_seconds_count")
    assert steps >= 4  # the four decoding requests ran one after another, each at least one step
    assert after.delta(before, "s2s_batch_rows_count") == steps  # both are recorded once per step
    assert after.delta(before, "s2s_engine_failures_total") == 0
    for gauge in ("s2s_running_sequences", "s2s_waiting_sequences", "s2s_kv_cache_rows_used"):
        assert after.get(gauge) == 0, gauge

    # Latency: one observation per request, in every bucket at or above what the client itself measured (the
    # server's own measure is shorter), and a sum no larger than the client's.
    for route in ("/v1/translate", "/v1/generate"):
        mine = [seconds for path, seconds, _ in timed if path == route]
        name = "s2s_request_latency_seconds"
        assert after.delta(before, name + "_count", route=route) == len(mine)
        assert 0 < after.delta(before, name + "_sum", route=route) <= sum(mine)
        buckets, earlier = after.buckets(name, route=route), before.buckets(name, route=route)
        assert buckets[float("inf")] - earlier.get(float("inf"), 0) == len(mine)
        for bound, count in buckets.items():
            moved = count - earlier.get(bound, 0)
            assert sum(s <= bound for s in mine) <= moved <= len(mine), (route, bound, moved, mine)


@pytest.mark.slow
def test_timeout_frees_rows(checkpoint):
    settings = Settings(dtype="float32", request_timeout_s=0.02, max_new_tokens=200)
    models = LocalModels(settings, ModelRegistry.from_paths([str(checkpoint)]))
    try:
        with TestClient(create_app(models, settings)) as c:
            error = error_of(c.post("/v1/translate", json={"text": ["hello"] * 4, "max_new_tokens": 200,
                                                            "beam_size": 4}), 504)
            assert error["limit"] == 0.02
            assert eventually(lambda: Scrape(c.get("/metrics").text).get("s2s_kv_cache_rows_used") == 0, timeout=5)
    finally:
        models.close()


def test_sampling_through_the_api_is_reproducible_per_seed(client):
    body = {"text": "the quick brown fox", "max_new_tokens": 15, "temperature": 1.5, "top_p": 0.9, "seed": 3}
    first = client.post("/v1/generate", json=body).json()
    assert client.post("/v1/generate", json=body).json()["text"] == first["text"]
    assert client.post("/v1/translate", json={"text": "a", "beam_size": 1}).status_code == 200


@pytest.mark.slow
def test_schema_limits_follow_the_settings(checkpoint):
    """Raising --max-beams / --max-texts raises what requests may use, and the OpenAPI document says so."""
    settings = Settings(dtype="float32", max_beams=20, max_batch_rows=24, max_texts=100, max_new_tokens=4)
    models = LocalModels(settings, ModelRegistry.from_paths([str(checkpoint)]))
    try:
        with TestClient(create_app(models, settings)) as c:
            ok = c.post("/v1/translate", json={"text": ["a"] * 70, "beam_size": 20, "n_best": 20})
            assert ok.status_code == 200, ok.text
            assert len(ok.json()["translations"]) == 70 and len(ok.json()["translations"][0]["alternatives"]) == 19
            assert error_of(c.post("/v1/translate", json={"text": "a", "beam_size": 21}), 422)["limit"] == 20
            schema = c.get("/openapi.json").json()["components"]["schemas"]["TranslateRequest"]["properties"]
            assert schema["beam_size"]["anyOf"][0]["maximum"] == 20
            assert schema["text"]["anyOf"][1]["maxItems"] == 100
    finally:
        models.close()


# Every request limit, as each API answers it: the status and the whole body, pinned (the front checks each limit
# once; each API words it in its own error table).
LIMITED = Settings(dtype="float32", max_texts=3, max_request_chars=60, max_document_chars=40, max_generate_chars=30,
                   max_beams=4, max_batch_rows=16, max_new_tokens=20, max_request_units=5, max_input_tokens=32,
                   max_job_chars=60)
MODEL = "shared-swish-safetensors"
LT = {"source": "en", "target": "de"}
SIX_LINES = "a\nb\nc\nd\ne\nf"
TWO_PARAGRAPHS = b"a" * 30 + b"\n\n" + b"b" * 31  # a .txt file's paragraphs are its texts: 61 characters


def native(message, field, limit):
    return {"error": {"code": "invalid_request", "message": message, "field": field, "limit": limit}}


def openai_error(message, param):
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": "invalid_request"}}


def user(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def limited(checkpoint):
    with in_process_client(LIMITED, [str(checkpoint)]) as c:
        yield c


@pytest.mark.parametrize("path,request_kwargs,status,body", [
    # native
    ("/v1/translate", dict(json={"text": ["a"] * 4}), 422,
     native("text: List should have at most 3 items after validation, not 4", "text", 3)),
    ("/v1/translate", dict(json={"text": ["a" * 30, "b" * 31]}), 422,
     native("text: the request has 61 characters; at most 60", "text", 60)),
    ("/v1/translate", dict(json={"text": "a" * 41}), 422,
     native("text[0]: String should have at most 40 characters", "text[0]", 40)),
    ("/v1/translate", dict(json={"text": SIX_LINES}), 422,
     native("text: the request has 6 sentences to translate; at most 5", "text", 5)),
    ("/v1/translate", dict(json={"text": "a", "beam_size": 5}), 422,
     native("beam_size: Input should be less than or equal to 4", "beam_size", 4)),
    ("/v1/translate", dict(json={"text": "a", "max_new_tokens": 21}), 422,
     native("max_new_tokens 21 is above the limit 20", "max_new_tokens", 20)),
    ("/v1/translate/file", dict(files={"file": ("a.txt", TWO_PARAGRAPHS)}), 422,
     native("file: the request has 61 characters; at most 60", "file", 60)),
    ("/v1/translate/file", dict(files={"file": ("a.txt", b"a" * 41)}), 422,
     native("file[0] has 41 characters; at most 40", "file[0]", 40)),
    ("/v1/translate/file", dict(files={"file": ("a.txt", SIX_LINES.encode())}), 422,
     native("file: the request has 6 sentences to translate; at most 5", "file", 5)),
    ("/v1/generate", dict(json={"text": "a" * 31}), 422,
     native("text: String should have at most 30 characters", "text", 30)),
    ("/v1/generate", dict(json={"text": "a", "num_beams": 5}), 422,
     native("num_beams: Input should be less than or equal to 4", "num_beams", 4)),
    ("/v1/generate", dict(json={"text": "a", "num_beams": 3, "temperature": 0.7}), 422,
     native("sampling (temperature, top_k, top_p, seed, or the model's default) needs 1 beam", "num_beams", 1)),
    ("/v1/generate", dict(json={"text": "a", "max_new_tokens": 21}), 422,
     native("max_new_tokens 21 is above the limit 20", "max_new_tokens", 20)),
    ("/v1/generate", dict(json={"text": "a", "min_new_tokens": 21}), 422,
     native("min_new_tokens 21 is above the limit 20", "min_new_tokens", 20)),
    # LibreTranslate
    ("/translate", dict(json={"q": ["a"] * 4, **LT}), 400, {"error": "q has 4 items; at most 3"}),
    ("/translate", dict(json={"q": ["a" * 30, "b" * 31], **LT}), 400,
     {"error": "Invalid request: request (61) exceeds text limit (60)"}),
    ("/translate", dict(json={"q": "a" * 41, **LT}), 400, {"error": "q has 41 characters; at most 40"}),
    ("/translate", dict(json={"q": ["a", "a" * 41], **LT}), 400, {"error": "q[1] has 41 characters; at most 40"}),
    ("/translate", dict(json={"q": SIX_LINES, **LT}), 400,
     {"error": "q: the request has 6 sentences to translate; at most 5"}),
    ("/translate", dict(json={"q": "a", **LT, "alternatives": 4}), 400,
     {"error": "Invalid request: alternatives: at most 3"}),
    ("/detect", dict(json={"q": "a" * 61}), 400, {"error": "Invalid request: request (61) exceeds text limit (60)"}),
    ("/translate_file", dict(data=LT, files={"file": ("a.txt", TWO_PARAGRAPHS)}), 400,
     {"error": "file: the request has 61 characters; at most 60"}),
    ("/translate_file", dict(data=LT, files={"file": ("a.txt", b"a" * 41)}), 400,
     {"error": "file[0] has 41 characters; at most 40"}),
    # a document job: its sentences counted when it runs, the job's error in LibreTranslate's words
    ("/translate_file", dict(data=LT, files={"file": ("a.txt", SIX_LINES.encode())}), 400,
     {"error": "Invalid request: the request has 6 sentences to translate; at most 5"}),
    # DeepL
    ("/v2/translate", dict(json={"text": ["a"] * 4, "target_lang": "DE"}), 400,
     {"message": "text has 4 items; at most 3"}),
    ("/v2/translate", dict(json={"text": ["a" * 30, "b" * 31], "target_lang": "DE"}), 413,
     {"message": "Request too large: 61 characters; at most 60"}),
    ("/v2/translate", dict(json={"text": ["a" * 41], "target_lang": "DE"}), 400,
     {"message": "text[0] has 41 characters; at most 40"}),
    ("/v2/translate", dict(json={"text": [SIX_LINES], "target_lang": "DE"}), 400,
     {"message": "text: the request has 6 sentences to translate; at most 5"}),
    # OpenAI
    ("/v1/completions", dict(json={"model": MODEL, "prompt": ["a", "b"], "n": 2}), 400,
     openai_error("2 prompts × n 2 is more than 3 choices", "n")),
    ("/v1/completions", dict(json={"model": MODEL, "prompt": ["a"] * 4}), 400,
     openai_error("4 prompts × n 1 is more than 3 choices", "prompt")),
    ("/v1/completions", dict(json={"model": MODEL, "prompt": "a" * 31}), 400,
     openai_error("prompt has 31 characters; at most 30", "prompt")),
    ("/v1/completions", dict(json={"model": MODEL, "prompt": ["a", "a" * 31]}), 400,
     openai_error("prompt[1] has 31 characters; at most 30", "prompt[1]")),
    ("/v1/completions", dict(json={"model": MODEL, "prompt": "a", "max_tokens": 21}), 400,
     openai_error("max_tokens 21 is above the limit 20", "max_tokens")),
    ("/v1/chat/completions", dict(json={"model": MODEL, "messages": user("a"), "n": 4}), 400,
     openai_error("1 prompts × n 4 is more than 3 choices", "n")),
    ("/v1/chat/completions", dict(json={"model": MODEL, "messages": user("a" * 31)}), 400,
     openai_error("messages has 31 characters; at most 30", "messages")),
    ("/v1/chat/completions", dict(json={"model": MODEL, "messages": user("a"), "max_completion_tokens": 21}), 400,
     openai_error("max_completion_tokens 21 is above the limit 20", "max_completion_tokens")),
    ("/v1/chat/completions", dict(json={"model": MODEL, "messages": user("a"), "max_tokens": 21}), 400,
     openai_error("max_tokens 21 is above the limit 20", "max_tokens")),
])
def test_each_limit_in_each_apis_words(limited, path, request_kwargs, status, body):
    response = limited.post(path, **request_kwargs)
    assert (response.status_code, response.json()) == (status, body)


@pytest.mark.parametrize("error", [TooManyTexts(4, 3, 2), TooManyCharacters(61, 60), TextTooLong("q[1]", 41, 40),
                                   TooManySentences(6, 5), TooManyBeams(5, 4), TooManyTokens("min_new_tokens", 21, 20),
                                   SamplingNeedsOneBeam()])
def test_limit_errors_cross_processes_whole(error):
    """A model's replica (Ray) or engine process raises them on the other side of a pickle."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and vars(copy) == vars(error) and copy.args == error.args


@pytest.mark.slow
def test_a_request_over_a_limit_is_refused_before_it_is_charged(checkpoint, tmp_path):
    """The front checks the limits before it enters the caller's charge: a request over max_request_chars is
    answered with the limit's error in every API, even past the quota, and costs nothing."""
    settings = replace(LIMITED, character_quota=60, key_store=str(tmp_path / "keys.sqlite"))
    over = ["a" * 30, "b" * 31]
    with in_process_client(settings, [str(checkpoint)]) as c:
        assert c.post("/v1/translate", json={"text": over}).status_code == 422
        assert c.post("/translate", json={"q": over, **LT}).status_code == 400
        assert c.post("/v2/translate", json={"text": over, "target_lang": "DE"}).status_code == 413
        assert c.get("/v2/usage").json() == {"character_count": 0, "character_limit": 60}
