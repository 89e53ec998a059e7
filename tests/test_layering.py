"""Import rules: model/ knows nothing of serving; server/ enters model/ only through its package surface;
the scheduler's side is free of torch and FastAPI."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_MODEL = {"server", "fastapi", "ray", "prometheus_client", "transformers", "uvicorn"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_model_imports_no_serving_code():
    for path in (ROOT / "model").rglob("*.py"):
        assert not imported_modules(path) & FORBIDDEN_IN_MODEL, path


def model_imports(path: Path) -> set[str]:
    """Every `model...` module name a file imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "model")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "model":
            names.add(node.module)
    return names


def test_server_enters_model_only_through_its_package_surface():
    for path in (ROOT / "server").rglob("*.py"):
        assert model_imports(path) <= {"model"}, path


def test_scheduler_and_request_import_neither_torch_nor_fastapi():
    check = ("import sys, server.scheduler, server.request; "
             "print(sorted(m for m in ('torch', 'fastapi', 'model') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
