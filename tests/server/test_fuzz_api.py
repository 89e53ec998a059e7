"""Schemathesis fuzzes the app through its own OpenAPI schema: no 5xx, and every 4xx is JSON naming the field."""

import pytest
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, given, settings

from server.api import create_app
from server.runtime.local import LocalModels
from server.front.registry import ModelRegistry
from server.settings import Settings

pytestmark = pytest.mark.slow


def check(case) -> None:
    response = case.call()
    assert response.status_code < 500, (case.path, case.body, response.text)
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert error["message"] and error["field"], response.text


def test_no_server_errors_and_4xx_name_the_field(checkpoint):
    config = Settings(dtype="float32", max_new_tokens=8, max_input_tokens=64, max_batch_rows=64, request_timeout_s=30)
    models = LocalModels(config, ModelRegistry.from_paths([str(checkpoint)]))
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(models, config))
    try:
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {op.path for op in operations} >= {"/v1/translate", "/v1/generate", "/v1/models"}
        for operation in operations:
            has_body = operation.method.upper() == "POST"  # invalid requests need something to be invalid
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)[: 2 if has_body else 1]:
                fuzz = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))(
                    given(case=operation.as_strategy(generation_mode=mode))(check))
                fuzz()
    finally:
        models.close()
