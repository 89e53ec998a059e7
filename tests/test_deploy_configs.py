"""deploy/: the Serve config and its copy in the KubeRay manifest pass Ray's own schema with no key Ray would ignore,
their args are settings the server knows, their deployment options apply to the app build_app makes, and the
Prometheus and Grafana files refer only to metrics the server exports. No Ray instance is started."""

from __future__ import annotations

import copy
import json
import re
import typing
from pathlib import Path

import pytest
import ray
import yaml
from prometheus_client.metrics import MetricWrapperBase
from pydantic import BaseModel
from ray.serve.schema import ServeDeploySchema

from server import metrics
from server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
BUILD_APP_KEYS = {"model", "max_models_per_replica"}  # build_app's own args; the others are Settings fields
DEPLOYMENTS = {"ModelServer"}  # the names server/deployment.py gives its deployments


def load_yaml(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text(encoding="utf-8"))


def rayservice() -> dict:
    return load_yaml("rayservice.yaml")


CONFIGS = {
    "serve_config.yaml": lambda: load_yaml("serve_config.yaml"),
    "rayservice.yaml serveConfigV2": lambda: yaml.safe_load(rayservice()["spec"]["serveConfigV2"]),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request) -> dict:
    return CONFIGS[request.param]()


def deployment(config: dict, name: str) -> dict:
    return next(d for d in config["applications"][0]["deployments"] if d["name"] == name)


# --- keys Ray does not know ---------------------------------------------------------------------------------------

def model_classes(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation admits, through Optional, Union, List and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in model_classes(arg)]


def unknown_keys(data: dict, model: type[BaseModel], path: str = "") -> list[str]:
    """Paths of the keys in data that model has no field for. Descends into fields typed as pydantic models;
    free-form dict fields (args, runtime_env, user_config, ...) are not descended."""
    fields = model.model_fields
    by_name = {**fields, **{f.alias: f for f in fields.values() if f.alias}}
    found = []
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in by_name:
            found.append(where)
            continue
        models = model_classes(by_name[key].annotation)
        if not models:
            continue
        if isinstance(value, dict):
            found += unknown_keys(value, models[0], where)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += unknown_keys(item, models[0], f"{where}[{item.get('name', i)}]")
    return found


def test_config_passes_rays_schema(config):
    ServeDeploySchema.model_validate(config)
    unknown = unknown_keys(config, ServeDeploySchema)
    assert not unknown, f"keys Ray would silently ignore: {unknown}"


@pytest.mark.parametrize("where, key, typo, reported", [
    ((), "http_options", "http_option", "http_option"),
    (("ModelServer",), "max_ongoing_requests", "max_ongoing_request",
     "applications[s2s].deployments[ModelServer].max_ongoing_request"),
    (("ModelServer", "autoscaling_config"), "target_ongoing_requests", "target_ongoing_request",
     "applications[s2s].deployments[ModelServer].autoscaling_config.target_ongoing_request"),
    (("ModelServer", "ray_actor_options"), "num_gpus", "num_gpu",
     "applications[s2s].deployments[ModelServer].ray_actor_options.num_gpu"),
])
def test_misspelled_key_is_reported(where, key, typo, reported):
    config = copy.deepcopy(CONFIGS["serve_config.yaml"]())
    node = config
    if where:
        node = deployment(config, where[0])
        for part in where[1:]:
            node = node[part]
    node[typo] = node.pop(key)
    assert unknown_keys(config, ServeDeploySchema) == [reported]


def test_free_form_fields_are_not_descended():
    config = copy.deepcopy(CONFIGS["serve_config.yaml"]())
    config["applications"][0]["runtime_env"]["env_vars"]["ANYTHING"] = "1"
    assert unknown_keys(config, ServeDeploySchema) == []


# --- the application the config builds ---------------------------------------------------------------------------

def test_args_are_settings(config):
    for app in config["applications"]:
        unknown = set(app["args"]) - BUILD_APP_KEYS - set(Settings.__dataclass_fields__)
        assert not unknown, f"application {app['name']}: args that are not Settings fields: {sorted(unknown)}"
        Settings(**{k: Settings.coerce(k, v) for k, v in app["args"].items() if k not in BUILD_APP_KEYS})


def test_config_applies_to_the_built_app(config, monkeypatch):
    """What the controller does with the config, without a cluster: build_app(args), then the options under
    `deployments:` merged into the deployments it made (Ray's override_deployment_info; internal API)."""
    from ray.serve._private.application_state import override_deployment_info
    from ray.serve._private.build_app import build_app as ray_build_app
    from ray.serve._private.deploy_utils import deploy_args_to_deployment_info

    import server.deployment as deployment_module
    from server.registry import ModelEntry, ModelRegistry

    def no_ray(*args, **kwargs):
        raise AssertionError("this test must not start Ray")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr("ray._private.worker.init", no_ray)  # what Ray's auto-init calls
    paths = []
    stub = ModelEntry("stub", "/nowhere", "marian", ("en",), ("de",), default_beams=1, max_positions=512)
    monkeypatch.setattr(deployment_module.ModelRegistry, "from_paths", classmethod(
        lambda cls, p: paths.append(p) or ModelRegistry([stub])))

    schema = ServeDeploySchema.model_validate(config).applications[0]
    args = config["applications"][0]["args"]
    built = ray_build_app(deployment_module.build_app(schema.args), name=schema.name, default_runtime_env={})
    assert paths == [[p for p in (args.get("model") or "").split(",") if p]]
    assert {d.name for d in built.deployments} == DEPLOYMENTS
    model_server = next(d for d in built.deployments if d.name == "ModelServer")
    settings = model_server._replica_config.init_args[0]
    for key, value in args.items():
        if key not in BUILD_APP_KEYS:
            assert getattr(settings, key) == value, key

    infos = {d.name: deploy_args_to_deployment_info(
        deployment_name=d.name, deployment_config_proto_bytes=d._deployment_config.to_proto_bytes(),
        replica_config_proto_bytes=d._replica_config.to_proto_bytes(), deployer_job_id="test", app_name=schema.name,
        ingress=d.name == built.ingress_deployment_name) for d in built.deployments}
    infos = override_deployment_info(infos, schema)  # raises for a deployment name the app does not have

    effective = infos["ModelServer"].deployment_config
    configured = deployment(config, "ModelServer")
    assert effective.max_ongoing_requests == configured["max_ongoing_requests"]
    assert infos["ModelServer"].replica_config.ray_actor_options["num_gpus"] == \
        configured["ray_actor_options"]["num_gpus"]
    if effective.autoscaling_config is not None:  # below the target, Serve never adds a replica
        assert effective.max_ongoing_requests >= effective.autoscaling_config.target_ongoing_requests
    assert effective.max_ongoing_requests >= settings.max_batch_rows, "replicas could never fill a batch"
    assert effective.graceful_shutdown_timeout_s >= settings.request_timeout_s, "scale-down would cut requests"
    assert effective.max_ongoing_requests > settings.max_batch_rows + settings.max_queued_requests, \
        "no room for health checks beside a full engine"


# --- KubeRay ------------------------------------------------------------------------------------------------------

def test_rayservice_manifest():
    manifest = rayservice()
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["authOptions"]["mode"] == "token"  # one token for every node (Ray 2.60 enforces tokens)

    def gpus(group: dict) -> int:
        return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
                   for c in group["template"]["spec"]["containers"])

    assert gpus(cluster["headGroupSpec"]) == 0
    gpu_groups = [g for g in cluster["workerGroupSpecs"] if gpus(g) > 0]
    assert gpu_groups, "no worker group requests nvidia.com/gpu"
    for group in gpu_groups:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]

    # Serve's autoscaling must fit in what the Ray autoscaler can add.
    serve_config = CONFIGS["rayservice.yaml serveConfigV2"]()
    model_server = deployment(serve_config, "ModelServer")
    wanted = model_server["autoscaling_config"]["max_replicas"] * model_server["ray_actor_options"]["num_gpus"]
    assert wanted <= sum(gpus(g) * g["maxReplicas"] for g in gpu_groups)


def test_rayservice_runs_the_same_application():
    local = CONFIGS["serve_config.yaml"]()["applications"]
    kuberay = CONFIGS["rayservice.yaml serveConfigV2"]()["applications"]
    same = ("name", "route_prefix", "import_path", "args", "runtime_env")
    assert [{k: app.get(k) for k in same} for app in kuberay] == [{k: app.get(k) for k in same} for app in local]
    assert [[d["name"] for d in app["deployments"]] for app in kuberay] == \
        [[d["name"] for d in app["deployments"]] for app in local]


# --- Docker -------------------------------------------------------------------------------------------------------

def test_dockerfile_copies_existing_paths_and_serves_port_8000():
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    sources = [source for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line
               for source in line.split()[1:-1]]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert not set(sources) & set(ignored)
    assert "EXPOSE 8000" in text and "/healthz" in text
    assert 'CMD ["python", "-m", "server", "--host", "0.0.0.0"]' in text
    assert f"ARG RAY_VERSION={rayservice()['spec']['rayClusterConfig']['rayVersion']}" in text


# --- metrics ------------------------------------------------------------------------------------------------------

def exported_metric_names() -> set[str]:
    """Sample names the server exports (server/metrics.py), as Prometheus sees them."""
    suffixes = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_sum", "_count", "_created"],
                "gauge": [""]}
    names = set()
    for value in metrics.ALL:
        if isinstance(value.prom, MetricWrapperBase):
            family = value.prom.describe()[0]
            names.update(family.name + s for s in suffixes[family.type])
    return names


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset",
                   "bool", "inf", "nan"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels, keywords, durations or numbers)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][\w:]*", expr):
        if not expr[match.end():].lstrip().startswith("(") and match.group().lower() not in PROMQL_KEYWORDS:
            names.add(match.group())
    return names


def test_promql_metric_names():
    expr = ('histogram_quantile(0.95, sum by (le, route) (rate(s2s_latency_bucket{route="/v1/x"}[$__rate_interval])))'
            " / on (route) group_left sum without (instance) (up) > bool 1e3")
    assert promql_metric_names(expr) == {"s2s_latency_bucket", "up"}


def test_prometheus_config():
    config = load_yaml("prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"s2s", "ray"}
    port = load_yaml("serve_config.yaml")["http_options"]["port"]
    assert jobs["s2s"]["metrics_path"] == "/metrics"
    assert [t.rsplit(":", 1)[1] for c in jobs["s2s"]["static_configs"] for t in c["targets"]] == [str(port)]
    assert jobs["ray"]["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]


def test_grafana_dashboard_uses_only_exported_metrics():
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text(encoding="utf-8"))
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in dashboard["templating"]["list"])
    exported = exported_metric_names()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = promql_metric_names(target["expr"])
            assert names and names <= exported, f"{panel['title']}: unknown metrics {sorted(names - exported)}"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
