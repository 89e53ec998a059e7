"""Import rules: model/ knows nothing of serving."""

import ast
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
