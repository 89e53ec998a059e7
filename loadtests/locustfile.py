"""Locust user classes for the translation server.

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 --web-host 127.0.0.1  # web UI on :8089
    locust -f loadtests/locustfile.py --headless -u 8 -r 4 -t 60s --host ...  # or: python -m loadtests.run

Users (weights 4:2:1, so 4 users are one poller, one streamer and two translators):
- TranslateUser: POST /v1/translate with one text ("/v1/translate") or a list of 2..--max-list-texts texts
  ("/v1/translate [list]"), sources drawn from --sentences, target languages mixed.
- StreamUser: POST /v1/generate with "stream": true (greedy, so tokens stream one by one). Its HTTP row times
  the response headers; each stream also fires SSE events "ttft" (request start to the first text event) and
  "inter-token" (time between consecutive text events). A stream that ends in an error event or without
  [DONE] counts as a failed request.
- PollerUser: GET /v1/models and /readyz every few seconds.

Options (command line or environment): --model (LOADTEST_MODEL, default: the server's default model),
--languages (LOADTEST_LANGUAGES, comma-separated; default: the model's languages from /v1/models),
--sentences (LOADTEST_SENTENCES, one source per line; default: loadtests/sentences_demo.txt),
--max-list-texts (LOADTEST_MAX_LIST_TEXTS), --max-new-tokens (LOADTEST_MAX_NEW_TOKENS),
--beam-size (LOADTEST_BEAM_SIZE, translate only; streams are greedy),
--api-key (LOADTEST_API_KEY, sent as a bearer token). The host comes from --host (LOCUST_HOST).
"""

from __future__ import annotations

import json
import logging
import random
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from locust import FastHttpUser, HttpUser, between, events, task

DEFAULT_HOST = "http://127.0.0.1:8000"
DEFAULT_SENTENCES = Path(__file__).with_name("sentences_demo.txt")
STREAM_TIMEOUT_S = (10, 90)  # connecting; waiting for the next bytes of a stream (queueing included)
log = logging.getLogger("loadtest")


@events.init_command_line_parser.add_listener
def add_arguments(parser) -> None:
    group = parser.add_argument_group("translation workload")
    group.add_argument("--model", default="", env_var="LOADTEST_MODEL", help="model id (default: server default)")
    group.add_argument("--languages", default="", env_var="LOADTEST_LANGUAGES",
                       help="target languages, comma-separated (default: the model's, from /v1/models)")
    group.add_argument("--sentences", default=str(DEFAULT_SENTENCES), env_var="LOADTEST_SENTENCES",
                       help="file of source sentences, one per line")
    group.add_argument("--max-list-texts", type=int, default=8, env_var="LOADTEST_MAX_LIST_TEXTS",
                       help="largest list in a list translate request")
    group.add_argument("--max-new-tokens", type=int, default=0, env_var="LOADTEST_MAX_NEW_TOKENS",
                       help="max_new_tokens per request (0: the server's default)")
    group.add_argument("--beam-size", type=int, default=0, env_var="LOADTEST_BEAM_SIZE",
                       help="beam_size per translate request (0: the model's default)")
    group.add_argument("--api-key", default="", env_var="LOADTEST_API_KEY",
                       help="bearer token, if the server needs one")


@dataclass
class Workload:
    """What the users send: set from the options when locust starts; languages, unless given, from the server
    when the test starts."""

    sentences: list[str] = field(default_factory=list)
    languages: list[str] = field(default_factory=list)
    model: str = ""
    max_list_texts: int = 8
    max_new_tokens: int = 0
    beam_size: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    def configure(self, options) -> None:
        lines = Path(options.sentences).read_text(encoding="utf-8").splitlines()
        self.sentences = [line.strip() for line in lines if line.strip()]
        if not self.sentences:
            raise ValueError(f"{options.sentences} has no sentences")
        self.model, self.max_new_tokens, self.beam_size = options.model, options.max_new_tokens, options.beam_size
        self.max_list_texts = max(2, options.max_list_texts)
        self.headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self.languages = [lang.strip() for lang in options.languages.split(",") if lang.strip()]

    def discover_languages(self, host: str) -> list[str]:
        request = urllib.request.Request(f"{host.rstrip('/')}/v1/models", headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                cards = json.load(response)["data"]
        except (OSError, ValueError, KeyError) as e:
            log.warning("could not read the model's languages from %s/v1/models (%s); sending no target_lang",
                        host, e)
            return []
        card = next((c for c in cards if c["id"] == self.model), cards[0] if cards else {})
        return list(card.get("languages", []))

    def body(self, text: str | list[str], **extra) -> dict:
        body = {"text": text, **extra}
        if self.model:
            body["model"] = self.model
        if self.max_new_tokens:
            body["max_new_tokens"] = self.max_new_tokens
        return body

    def translate_body(self, count: int | None) -> dict:
        """count None: one text as a plain string; otherwise a list of `count` texts."""
        text = random.choice(self.sentences) if count is None else random.choices(self.sentences, k=count)
        extra = {"target_lang": random.choice(self.languages)} if self.languages else {}
        if self.beam_size:
            extra["beam_size"] = self.beam_size
        return self.body(text, **extra)

    def generate_body(self) -> dict:
        text = random.choice(self.sentences)
        if self.languages:  # generate takes raw source text: the language token goes in front
            text = f">>{random.choice(self.languages)}<< {text}"
        return self.body(text, stream=True, num_beams=1)


workload = Workload()


@events.init.add_listener
def configure_workload(environment, **_) -> None:
    workload.configure(environment.parsed_options)  # a bad option stops locust here, before any user starts


@events.test_start.add_listener
def find_languages(environment, **_) -> None:
    if not workload.languages:
        workload.languages = workload.discover_languages(environment.host or DEFAULT_HOST)
    log.info("workload: %d sentences, languages %s", len(workload.sentences), workload.languages or "none")


class TranslateUser(FastHttpUser):
    weight = 4
    host = DEFAULT_HOST
    wait_time = between(0.1, 0.5)

    @task(3)
    def translate_one(self) -> None:
        self.translate(workload.translate_body(None), 1, "/v1/translate")

    @task(1)
    def translate_list(self) -> None:
        count = random.randint(2, workload.max_list_texts)
        self.translate(workload.translate_body(count), count, "/v1/translate [list]")

    def translate(self, body: dict, count: int, name: str) -> None:
        with self.client.post("/v1/translate", json=body, headers=workload.headers, name=name,
                              catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return
            translations = response.json().get("translations", [])
            if len(translations) != count:
                response.failure(f"{len(translations)} translations for {count} texts")


class StreamUser(HttpUser):
    """requests-based: geventhttpclient buffers streamed bodies, which would hide when each event arrived."""

    weight = 2
    host = DEFAULT_HOST
    wait_time = between(0.1, 0.5)

    @task
    def generate_stream(self) -> None:
        start = time.perf_counter()
        with self.client.post("/v1/generate", json=workload.generate_body(), headers=workload.headers,
                              name="/v1/generate [stream]", stream=True, timeout=STREAM_TIMEOUT_S,
                              catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return
            try:
                problem = self.read_events(response, start)
            except (OSError, ValueError) as e:  # requests' connection errors are OSErrors; bad JSON or UTF-8
                problem = f"stream broken: {e!r}"
            if problem:
                response.failure(problem)

    def read_events(self, response, start: float) -> str | None:
        """Reads the SSE stream, firing ttft/inter-token events; returns what was wrong with it, if anything."""
        last = None
        for raw in response.iter_lines(chunk_size=None):  # None: each chunk as soon as it arrives
            line = raw.decode("utf-8")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return None
            event = json.loads(line[len("data: "):])
            if "error" in event:
                return f"error event: {event['error']}"
            if event.get("text"):
                now = time.perf_counter()
                name, since = ("ttft", start) if last is None else ("inter-token", last)
                self.fire_sse(name, (now - since) * 1000)
                last = now
        return "the stream ended without [DONE]"

    def fire_sse(self, name: str, milliseconds: float) -> None:
        self.environment.events.request.fire(request_type="SSE", name=name, response_time=milliseconds,
                                             response_length=0, exception=None, context={})


class PollerUser(FastHttpUser):
    weight = 1
    host = DEFAULT_HOST
    wait_time = between(2, 5)

    @task
    def poll(self) -> None:
        self.client.get("/v1/models", headers=workload.headers)
        self.client.get("/readyz")
