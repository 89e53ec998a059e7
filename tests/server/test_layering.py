"""Import rules: model/ knows nothing of serving; server/ enters model/ only through its package surface; each
folder of server/ keeps its layer's rule, and no server module imports itself back through others."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
FORBIDDEN_IN_MODEL = {"server", "fastapi", "ray", "prometheus_client", "transformers", "uvicorn"}
HTTP = {"fastapi", "starlette", "pydantic", "uvicorn"}
PROCESSES = {"ray", "uvicorn", "multiprocessing"}
LAYERS = ("api", "front", "engine", "runtime")
# What each part of server/ may not import: third-party roots, and server's own folders.
RULES = {
    "api": (PROCESSES - {"uvicorn"}, {"engine", "runtime"}),  # HTTP: the only importer of FastAPI and pydantic
    "front": (HTTP | PROCESSES, {"api", "runtime"}),  # domain jobs in, results out
    "engine": (HTTP | PROCESSES, {"api", "front", "runtime"}),  # the model's steps, no HTTP, no Ray
    "runtime": (set(), set()),  # processes: the only importer of Ray, uvicorn and multiprocessing
    "shared": (HTTP | PROCESSES, set(LAYERS)),  # settings, errors, domain, metrics: everyone's vocabulary
}


def imports(path: Path) -> set[str]:
    """Every module a file imports (anywhere in it, lazy imports too), relative ones resolved to full names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if node.module:
                names.add(base)
            else:  # `from .. import x` imports module x
                names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in LAYERS else "shared"


def test_model_imports_no_serving_code():
    for path in (ROOT / "model").rglob("*.py"):
        assert not {name.split(".")[0] for name in imports(path)} & FORBIDDEN_IN_MODEL, path


def test_server_enters_model_only_through_its_package_surface():
    for path in SERVER.rglob("*.py"):
        assert {name for name in imports(path) if name.split(".")[0] == "model"} <= {"model"}, path


def test_each_folder_of_server_keeps_its_rule():
    for path in SERVER.rglob("*.py"):
        if path.name == "__main__.py":  # the command line starts processes: above every layer
            continue
        part = part_of(module_name(path))
        forbidden_roots, forbidden_layers = RULES[part]
        names = imports(path)
        assert not {name.split(".")[0] for name in names} & forbidden_roots, (path, part)
        assert not {name.split(".")[1] for name in names
                    if name.startswith("server.") and name.count(".") >= 1} & forbidden_layers, (path, part)


def test_server_has_no_import_cycle():
    modules = {module_name(path): path for path in SERVER.rglob("*.py")}
    imported = {name: imports(path) for name, path in modules.items()}  # each file parsed once
    graph = {name: {m for m in modules if m != name and any(i == m or i.startswith(m + ".") for i in imported[name])
                    and not name.startswith(m + ".")}  # a module importing its package's __init__ is no cycle
             for name in modules}
    done, on_path = set(), []

    def visit(name):
        if name in on_path:
            raise AssertionError("import cycle: " + " -> ".join(on_path[on_path.index(name):] + [name]))
        if name in done:
            return
        on_path.append(name)
        for other in graph[name]:
            visit(other)
        on_path.pop()
        done.add(name)

    for name in graph:
        visit(name)


def test_scheduler_and_sequences_import_neither_torch_nor_fastapi():
    check = ("import sys, server.engine.scheduler, server.engine.sequence; "
             "print(sorted(m for m in ('torch', 'fastapi', 'model') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# What server/api/ may raise: its reading of a request (a parameter missing or malformed, a body that cannot be read,
# a key or an Accept header it cannot use, a page or a download it does not have). Every policy (languages, file
# types, models, glossaries, limits, quotas) is a typed error raised in the front and worded by each API's table.
PARSING_ERRORS = {"InvalidRequest", "BadBody", "InvalidKey", "TsvNotAccepted", "FileNotFound",
                  "StarletteHTTPException", "error"}  # deps.KeySending.error: how an API answers a key it cannot use


def raised(path: Path) -> set[str]:
    """The classes a file raises by name (`raise X(...)`, `raise X`); a re-raise of a caught error names none."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id[:1].isupper():
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


def test_api_raises_only_errors_of_reading_a_request():
    for path in (SERVER / "api").rglob("*.py"):
        assert raised(path) <= PARSING_ERRORS, (path, raised(path) - PARSING_ERRORS)
