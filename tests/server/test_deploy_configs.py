"""deploy/: the Serve config and its copy in the KubeRay manifest pass Ray's own schema with no key Ray would ignore,
their args are settings the server knows, their deployment options apply to the app build_app makes, every Python
object they name (import paths) resolves, the Dockerfile's python steps run against the installed package and the
paths it copies exist, and the Prometheus and Grafana files refer only to metrics the server exports. No Ray
instance is started. Module names are read from the deploy files, not repeated here."""

from __future__ import annotations

import copy
import fnmatch
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
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

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BUILD_APP_KEYS = {"model", "max_models_per_replica"}  # build_app's own args; the others are Settings fields
DEPLOYMENTS = {"Seq2SeqServer"}  # the names build_app (the configs' import_path) gives its deployments


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
    (("Seq2SeqServer",), "max_ongoing_requests", "max_ongoing_request",
     "applications[s2s].deployments[Seq2SeqServer].max_ongoing_request"),
    (("Seq2SeqServer", "autoscaling_config"), "look_back_period_s", "look_back_period",
     "applications[s2s].deployments[Seq2SeqServer].autoscaling_config.look_back_period"),
    (("Seq2SeqServer", "ray_actor_options"), "num_gpus", "num_gpu",
     "applications[s2s].deployments[Seq2SeqServer].ray_actor_options.num_gpu"),
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

    import_path = config["applications"][0]["import_path"]
    deployment_module = importlib.import_module(split_import_path(import_path)[0])
    build_app = resolve_import_path(import_path)
    ModelRegistry = deployment_module.ModelRegistry  # noqa: N806 (the registry build_app's module uses)
    ModelEntry = sys.modules[ModelRegistry.__module__].ModelEntry  # noqa: N806

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
    built = ray_build_app(build_app(schema.args), name=schema.name, default_runtime_env={})
    assert paths == [[p for p in (args.get("model") or "").split(",") if p]]
    assert {d.name for d in built.deployments} == DEPLOYMENTS
    model_server = next(d for d in built.deployments if d.name == "Seq2SeqServer")
    settings = model_server._replica_config.init_args[0]
    for key, value in args.items():
        if key not in BUILD_APP_KEYS:
            assert getattr(settings, key) == value, key

    infos = {d.name: deploy_args_to_deployment_info(
        deployment_name=d.name, deployment_config_proto_bytes=d._deployment_config.to_proto_bytes(),
        replica_config_proto_bytes=d._replica_config.to_proto_bytes(), deployer_job_id="test", app_name=schema.name,
        ingress=d.name == built.ingress_deployment_name) for d in built.deployments}
    infos = override_deployment_info(infos, schema)  # raises for a deployment name the app does not have

    effective = infos["Seq2SeqServer"].deployment_config
    configured = deployment(config, "Seq2SeqServer")
    assert effective.max_ongoing_requests == configured["max_ongoing_requests"]
    assert infos["Seq2SeqServer"].replica_config.ray_actor_options["num_gpus"] == \
        configured["ray_actor_options"]["num_gpus"]
    assert effective.max_ongoing_requests >= settings.max_batch_rows, "replicas could never fill a batch"
    assert effective.graceful_shutdown_timeout_s >= settings.request_timeout_s, "scale-down would cut requests"
    assert effective.max_ongoing_requests > settings.max_batch_rows + settings.max_waiting_sequences, \
        "no room for health checks beside a full engine"


def test_config_writes_the_request_limits_the_app_derives(config):
    """`serve run` with a config queues as `python -m server` does: the request limits the config writes under
    Seq2SeqServer are those build() gives the deployment for the config's args, and there is one rule for them."""
    app = config["applications"][0]
    deployment_module = importlib.import_module(split_import_path(app["import_path"])[0])
    settings = Settings(**{k: Settings.coerce(k, v) for k, v in app["args"].items() if k not in BUILD_APP_KEYS})
    configured = deployment(config, "Seq2SeqServer")
    limits = deployment_module.request_limits(settings)
    assert {key: configured[key] for key in limits} == limits
    built = deployment_module.build(settings, registry=None)._bound_deployment._deployment_config
    assert {key: getattr(built, key) for key in limits} == limits


# --- Python objects the deploy files name ------------------------------------------------------------------------

IMPORT_PATH_KEYS = {"import_path", "worker_process_setup_hook"}  # Serve application builder; Ray runtime_env hook


def split_import_path(path: str) -> tuple[str, str]:
    """(module, attribute) of "module:attr" or "module.attr", the two forms Ray accepts."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    assert module and attr, f"not an import path: {path!r}"
    return module, attr


def resolve_import_path(path: str):
    """What Ray does with an import path: import the module, then get the attribute."""
    module, attr = split_import_path(path)
    value = importlib.import_module(module)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def named_import_paths(node, where: str = "") -> list[tuple[str, str, str]]:
    """(where, key, import path) for each value in a loaded deploy file that names a Python object: the keys in
    IMPORT_PATH_KEYS, and environment variables named *_IMPORT_PATH, in env_vars mappings and in Kubernetes env
    lists ({name, value}). serveConfigV2 (YAML inside a string) is parsed and searched too."""
    found = []
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and name.endswith("_IMPORT_PATH") and isinstance(node.get("value"), str):
            found.append((where, name, node["value"]))
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if key == "serveConfigV2" and isinstance(value, str):
                value = yaml.safe_load(value)
            if isinstance(value, str) and (key in IMPORT_PATH_KEYS or str(key).endswith("_IMPORT_PATH")):
                found.append((here, key, value))
            else:
                found += named_import_paths(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += named_import_paths(item, f"{where}[{i}]")
    return found


def test_named_import_paths_finds_every_form():
    manifest = {"spec": {
        "serveConfigV2": "applications:\n  - import_path: a.b:build\n"
                         "    runtime_env: {worker_process_setup_hook: a.hook, env_vars: {X_IMPORT_PATH: a.x}}\n",
        "containers": [{"env": [{"name": "Y_IMPORT_PATH", "value": "a.y"}, {"name": "OTHER", "value": "a.z"}]}]}}
    assert sorted(path for _, _, path in named_import_paths(manifest)) == ["a.b:build", "a.hook", "a.x", "a.y"]
    assert split_import_path("a.b:build") == split_import_path("a.b.build") == ("a.b", "build")


@pytest.mark.parametrize("name", ["serve_config.yaml", "rayservice.yaml"])
def test_named_import_paths_resolve(name):
    from ray.serve._private.http_util import validate_http_proxy_callback_return
    from ray.serve.deployment import Application

    named = named_import_paths(load_yaml(name))
    assert any(key == "import_path" for _, key, _ in named), f"{name}: no application import_path found"
    if name == "rayservice.yaml":  # its proxies load the server's middleware (a lost replica answers 503)
        assert any(key == "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH" for _, key, _ in named)
    for where, key, path in named:
        try:
            value = resolve_import_path(path)
        except (ImportError, AttributeError) as e:
            raise AssertionError(f"{name}: {where} = {path!r} does not resolve: {e!r}") from e
        if key == "import_path":  # an application builder, or an application bound at import
            assert callable(value) or isinstance(value, Application), f"{name}: {where} = {path!r}"
        else:  # Ray calls what the others name
            assert callable(value), f"{name}: {where} = {path!r} is not callable"
        if key == "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH":  # what each Serve proxy does at start
            assert validate_http_proxy_callback_return(value()), f"{name}: {path!r} returns no middleware"


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
    model_server = deployment(serve_config, "Seq2SeqServer")
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

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) for each instruction of a Dockerfile, continuation lines joined; comment lines
    (and parser directives) dropped, as Docker drops them, also inside a continuation."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        keyword, _, args = (current + stripped).partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        current = ""
    assert not current, "the Dockerfile ends inside a continuation line"
    return instructions


def command_words(args: str) -> list[str]:
    """The words of a RUN/CMD/ENTRYPOINT command: exec form (a JSON list) or shell form."""
    return json.loads(args) if args.startswith("[") else shlex.split(args)


def python_arguments(words: list[str], option: str) -> list[str]:
    """What follows each `python <option>` in a command's words (`-c`: the code, `-m`: the module)."""
    return [words[i + 2] for i in range(len(words) - 2)
            if re.fullmatch(r"(?:\S*/)?python(?:3(?:\.\d+)?)?", words[i]) and words[i + 1] == option]


def dockerfile_python(text: str) -> tuple[list[str], list[str], list[str]]:
    """(the code of every `python -c` of a RUN step, that of the HEALTHCHECK's, the modules of every `python -m`)."""
    run, healthcheck, modules = [], [], []
    for keyword, args in dockerfile_instructions(text):
        if keyword == "HEALTHCHECK":
            words = command_words(args)
            if "CMD" in words:
                healthcheck += python_arguments(words[words.index("CMD") + 1:], "-c")
                modules += python_arguments(words[words.index("CMD") + 1:], "-m")
        elif keyword in ("RUN", "CMD", "ENTRYPOINT"):
            words = command_words(args)
            run += python_arguments(words, "-c") if keyword == "RUN" else []
            modules += python_arguments(words, "-m")
    return run, healthcheck, modules


def dockerfile_context_sources(text: str) -> list[str]:
    """The build-context paths COPY and ADD take (not --from= copies of another stage or image, not URLs)."""
    sources = []
    for keyword, args in dockerfile_instructions(text):
        if keyword not in ("COPY", "ADD"):
            continue
        words = command_words(args)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources += [p for p in paths[:-1] if "://" not in p]
    return sources


def test_dockerfile_parsing():
    text = ('FROM python AS build\n# a comment\nCOPY --chown=1 a b ./\nCOPY --from=build /opt /opt\n'
            'RUN pip install . \\\n    # comment inside\n    && python -c "import x; print(\'y\')" \\\n'
            '    && python3 -m pip --version\nHEALTHCHECK --interval=1s CMD python -c "import z"\n'
            'CMD ["python", "-m", "server"]\n')
    assert dockerfile_context_sources(text) == ["a", "b"]
    assert dockerfile_python(text) == (["import x; print('y')"], ["import z"], ["pip", "server"])
    assert dockerignored("tests/a.py", ["tests"]) and dockerignored("model/x/__pycache__", ["**/__pycache__"])
    assert not dockerignored("model", ["tests", "**/__pycache__", "*.whl"])


@pytest.fixture(scope="module")
def installed_cwd(tmp_path_factory) -> Path:
    """Where the Dockerfile's python steps run. An empty directory when the distribution is installed as a
    regular copy, so that its packages come from site-packages, as in the image; the repository root when it is
    installed editable (the same packages, and this checkout's even when the install points at another one) or not
    installed at all (the tree `pip install .` installs)."""
    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    try:
        direct_url = importlib.metadata.distribution(name).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return ROOT
    if direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"):
        return ROOT
    return tmp_path_factory.mktemp("docker-python")


def run_python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_dockerfile_python_steps_run_against_the_installed_package(installed_cwd):
    """Each `python -c` of a RUN step runs as the build runs it; the HEALTHCHECK's needs a running server, so it
    is only compiled; each `python -m` module (the CMD's) is found, with its __main__ for a package."""
    run, healthcheck, modules = dockerfile_python((DEPLOY / "Dockerfile").read_text(encoding="utf-8"))
    assert run and healthcheck and modules
    for code in run:
        done = run_python(installed_cwd, "-c", code)
        assert done.returncode == 0, f"Dockerfile step python -c {code!r} fails:\n{done.stderr}"
    for code in healthcheck:
        compile(code, "<HEALTHCHECK>", "exec")
    find = ("import importlib.util, sys\n"
            "spec = importlib.util.find_spec(sys.argv[1])\n"
            "if spec is not None and spec.submodule_search_locations is not None:\n"
            "    spec = importlib.util.find_spec(sys.argv[1] + '.__main__')\n"
            "sys.exit(spec is None)")
    for module in modules:
        done = run_python(installed_cwd, "-c", find, module)
        assert done.returncode == 0, f"Dockerfile runs python -m {module}, which is not found:\n{done.stderr}"


def test_a_moved_name_fails_the_dockerfile_check(installed_cwd):
    run, _, _ = dockerfile_python('RUN python -c "from model import no_such_name"\n')
    done = run_python(installed_cwd, "-c", run[0])
    assert done.returncode != 0 and "ImportError" in done.stderr


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether a .dockerignore pattern excludes path or a folder above it (the patterns used here: no `!`)."""
    parts = Path(path).parts
    return any(fnmatch.fnmatch("/".join(parts[:i]), pattern.strip("/"))
               or pattern.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pattern[3:])
               for pattern in patterns for i in range(1, len(parts) + 1))


def test_dockerfile_copies_existing_paths_and_serves_port_8000():
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    sources = dockerfile_context_sources(text)
    assert sources
    ignored = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")]
    for source in sources:
        if any(c in source for c in "*?["):
            assert list(ROOT.glob(source)), f"COPY {source}: matches nothing"
        else:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
        assert not dockerignored(source, ignored), f"COPY {source}: excluded by Dockerfile.dockerignore"
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


# --- autoscaling ---------------------------------------------------------------------------------------------------

def test_config_writes_the_autoscaling_profile_the_app_derives(config):
    """The autoscaling_config and graceful shutdown timeout the config writes are the profile build() derives
    from its args (runtime.autoscaling) for the config's replica bounds, so `serve run` scales as `python -m server
    --min-replicas ... --max-replicas ...` does."""
    from server.runtime.autoscaling import (
        Scaling,
        autoscaling_config,
        graceful_shutdown_timeout_s,
    )

    app = config["applications"][0]
    settings = Settings(**{k: Settings.coerce(k, v) for k, v in app["args"].items() if k not in BUILD_APP_KEYS})
    configured = deployment(config, "Seq2SeqServer")
    bounds = Scaling(configured["autoscaling_config"]["min_replicas"], configured["autoscaling_config"]["max_replicas"])
    assert configured["autoscaling_config"] == autoscaling_config(settings, bounds)
    assert configured["graceful_shutdown_timeout_s"] == graceful_shutdown_timeout_s(settings)
