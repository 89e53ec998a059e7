import contextlib
import importlib
import os
import pkgutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server.runtime.ray_main import LOCAL_RAY_ENV  # noqa: E402

# Ray reads these at import: every Ray process the tests start stays on 127.0.0.1.
for key, value in LOCAL_RAY_ENV.items():
    os.environ.setdefault(key, value)

# Servers the tests start hold their outputs to float32 oracles (transformers, the in-process Translator); `auto`
# would pick bfloat16 on a CPU with native bfloat16. Server processes read this; the tests' own Settings name
# float32; the tests of `auto` and bfloat16 name theirs.
os.environ.setdefault("SERVER_DTYPE", "float32")

# Under pytest-xdist (`-n 2 --dist loadfile`, what CI runs: a module's tests on one worker, so that its servers
# start once) two workers share the cores: OpenMP threads that spin while idle (the default) would take a core
# from the other worker's tests; set before torch starts its threads.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from marian_fixtures import VARIANTS, build_checkpoint  # noqa: E402


def import_schemathesis() -> None:
    """Every module of schemathesis, now. It imports most of them at first use, inside a fuzz test, where pytest's
    assertion rewriting (schemathesis is a pytest plugin) parses them; CI's parses there failed with CPython
    3.11.7's "AST constructor recursion depth mismatch" (Hypothesis changes the recursion limit under them). A
    module whose optional dependency is missing (its Allure reporter) is left out."""
    import schemathesis

    for module in pkgutil.walk_packages(schemathesis.__path__, "schemathesis."):
        with contextlib.suppress(ImportError):
            importlib.import_module(module.name)


import_schemathesis()

LAYERS = ("model", "server", "e2e", "tools")  # tests/<layer>/: each test carries its folder's marker


def pytest_collection_modifyitems(items):
    from model.kernels import isa

    # model.kernels.dtypes refuses bfloat16 where this process's kernels cannot pack it (below AVX-512, or capped)
    no_bfloat16 = None if isa.bfloat16_packs() else pytest.mark.skip(
        reason=f"bfloat16 does not run on {isa.instruction_sets()}")
    for item in items:
        if item.path.parent.name in LAYERS:
            item.add_marker(item.path.parent.name)
        params = getattr(item, "callspec", None)
        if no_bfloat16 and params and params.params.get("dtype") == "bfloat16":
            item.add_marker(no_bfloat16)


def pytest_collection_finish(session):
    """Start the GPU check's dry run now when this session will run it (test_gpu_check.DryRun); under xdist, where
    every worker collects every test, its module starts it on the worker that runs it."""
    if XDIST_WORKER or session.config.option.collectonly:
        return
    if any(item.path.name == "test_gpu_check.py" for item in session.items):
        from test_gpu_check import DryRun

        DryRun.started = DryRun()


def pytest_sessionfinish(session):
    """A dry run the session started and never waited for (stopped early, -x) ends with it."""
    dry_run = getattr(sys.modules.get("test_gpu_check"), "DryRun", None)
    if dry_run is not None and dry_run.started is not None:
        dry_run.started.stop()


@pytest.fixture(scope="session", autouse=True)
def own_worker_directory(tmp_path_factory):
    """Module- and session-scoped fixtures, made before any test's own folder, run in a folder of this worker's:
    an app they make keeps its key store and document jobs away from the other worker's and the repository's
    (apps on one store take each other's queued jobs, each under its own limits: a job over `limited`'s sentence
    limit came back done)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("worker"))
        yield


@pytest.fixture(autouse=True)
def own_working_directory(tmp_path, monkeypatch):
    """Each test runs in a folder of its own, so an app made in the test keeps its key store (keys.sqlite in the
    working directory, the default) to itself, as a fresh server would."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def alone():
    """The demo model's float32 translation of one text into German, translated alone: what a server must answer."""
    from model import Translator

    translator = Translator.from_pretrained()
    return lambda text: translator.translate([text], target_lang="de")[0].text


@pytest.fixture
def jobs(monkeypatch) -> list:
    """The translation jobs the front receives in this test (a file's or a document job's: one a chunk), recorded as
    they pass: what an API filled in, its glossary included."""
    from server.front import dispatch

    seen = []
    original = dispatch._translate

    async def recording(provider, job, *args):
        seen.append(job)
        return await original(provider, job, *args)

    monkeypatch.setattr(dispatch, "_translate", recording)
    return seen


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: build_checkpoint(root / name, **kw) for name, kw in VARIANTS.items()}


@pytest.fixture(scope="session")
def checkpoint(checkpoints) -> Path:
    return checkpoints["shared-swish-safetensors"]


@pytest.fixture(scope="session")
def family_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny NLLB, M2M100 and mBART-50 checkpoints (see family_fixtures)."""
    from family_fixtures import BUILDERS

    root = tmp_path_factory.mktemp("families")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="session")
def text2text_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny T5 v1.0, T5 v1.1, MADLAD-style and BART checkpoints (see text2text_fixtures)."""
    from text2text_fixtures import BUILDERS

    root = tmp_path_factory.mktemp("text2text")
    return {name: build(root / name) for name, build in BUILDERS.items()}
