"""Schemathesis fuzzes the app through its own OpenAPI schema: no 5xx, and every 4xx is JSON naming the field."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from server.app import create_app
from server.local import LocalModels
from server.registry import ModelRegistry
from server.settings import Settings


@pytest.fixture(scope="module")
def api_schema(checkpoint):
    config = Settings(max_new_tokens=8, max_input_tokens=64, max_batch_rows=64, request_timeout_s=30)
    models = LocalModels(config, ModelRegistry.from_paths([str(checkpoint)]))
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(models, config))
    models.close()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_4xx_name_the_field(case):
    response = case.call()
    assert response.status_code < 500, response.text
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert error["message"] and error["field"], response.text
