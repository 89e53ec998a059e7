"""Schemathesis fuzzes the three compatible APIs, which /openapi.json leaves out (each follows its own published
document): an OpenAPI document built here from each route's own parameter model, bodies as JSON and, where the API
takes forms, as forms. No 5xx, and every 4xx in the error shape of the API it came through."""

import time

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from server.api import create_app
from server.api.deepl import DeepLTranslateForm
from server.api.libretranslate import DetectForm, LibreTranslateForm
from server.api.openai import ChatRequest, CompletionRequest
from server.front.registry import ModelRegistry
from server.runtime.local import LocalModels
from server.settings import Settings

pytestmark = pytest.mark.slow

JSON, FORM = "application/json", "application/x-www-form-urlencoded"


def message_only(key: str):
    def check(body: dict) -> None:
        assert list(body) == [key] and isinstance(body[key], str) and body[key], body
    return check


def openai_error(body: dict) -> None:
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], body
    assert error["type"] in ("invalid_request_error", "authentication_error", "rate_limit_error"), body


# path: (the route's parameter model, the media types it reads, its 4xx body's shape)
ROUTES = {
    "/v2/translate": (DeepLTranslateForm, (JSON, FORM), message_only("message")),
    "/translate": (LibreTranslateForm, (JSON, FORM), message_only("error")),
    "/detect": (DetectForm, (JSON, FORM), message_only("error")),
    "/v1/completions": (CompletionRequest, (JSON,), openai_error),
    "/v1/chat/completions": (ChatRequest, (JSON,), openai_error),
}
MODEL = "shared-swish-safetensors"  # the `checkpoint` fixture's folder: its id; it translates en → de, fr
# Fields the models do not type as the served values: valid requests name those (invalid ones anything else)
SERVED = {"target_lang": ["DE", "FR", "de", "fr"], "source_lang": ["EN", "en"], "source": ["en", "auto"],
          "target": ["de", "fr"], "model": [MODEL]}


def document() -> dict:
    """An OpenAPI 3.1 document of the routes above, each body the JSON schema of the route's parameter model."""
    paths, components = {}, {}
    for path, (model, media_types, _) in ROUTES.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        for name in SERVED.keys() & schema["properties"].keys():
            schema["properties"][name] = {"enum": SERVED[name]}
        paths[path] = {"post": {"requestBody": {"required": True, "content": {t: {"schema": schema}
                                                                             for t in media_types}},
                                "responses": {"200": {"description": "the API's answer"}}}}
    return {"openapi": "3.1.0", "info": {"title": "compatible APIs", "version": "1"}, "paths": paths,
            "components": {"schemas": components}}


@pytest.fixture(scope="module")
def app(checkpoint):
    config = Settings(dtype="float32", max_new_tokens=8, max_input_tokens=64, max_batch_rows=64, request_timeout_s=30)
    models = LocalModels(config, ModelRegistry.from_paths([str(checkpoint)]))
    try:
        yield create_app(models, config)
    finally:
        models.close()


def test_no_server_errors_and_4xx_in_each_apis_shape(app):
    schema = schemathesis.openapi.from_dict(document())
    schema.app = app
    seen: dict[str, set[int]] = {path: set() for path in ROUTES}

    def check(case) -> None:
        response = case.call()
        assert response.status_code < 500, (case.path, case.body, response.text)
        seen[case.path].add(response.status_code)
        if 400 <= response.status_code < 500:
            ROUTES[case.path][2](response.json())

    for operation in (result.ok() for result in schema.get_all_operations()):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))(
                given(case=operation.as_strategy(generation_mode=mode))(check))
            fuzz()
    # every route was reached, and each answered some request and refused another
    assert all(200 in statuses and any(400 <= s < 500 for s in statuses) for statuses in seen.values()), seen


def test_a_huge_n_is_refused_before_its_choices_are_made(app):
    """Found by the fuzzing above: n = 1,422,367 took 20 s to refuse, building a job per choice first."""
    with TestClient(app) as client:
        start = time.monotonic()
        response = client.post("/v1/completions", json={"model": MODEL, "prompt": "seven", "n": 10**8})
        took = time.monotonic() - start
    assert response.status_code == 400 and response.json()["error"]["param"] == "n", response.text
    assert took < 5  # bounded before it starts: no work in proportion to n (10^8 jobs would take many minutes)
