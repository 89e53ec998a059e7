"""python -m server [--no-ray] [--model DIR ...] [--host 127.0.0.1] [--port 8000] [...]"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

from .runtime.listen import ensure_free
from .runtime.ray_main import add_ray_arguments, scaling_of
from .settings import Settings


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Settings]:
    p = argparse.ArgumentParser(prog="python -m server", description="Serve translation models over HTTP.")
    p.add_argument("--model", action="append", help="a checkpoint directory, a directory of them, or a Hub repo id "
                                                   "ORG/NAME[@REVISION] (repeatable; default: the demo model)")
    p.add_argument("--no-ray", action="store_true", help="serve in this process with uvicorn, without Ray")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve model replicas")
    add_ray_arguments(p)
    Settings.add_arguments(p)
    args = p.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k in Settings.__dataclass_fields__ and k != "model"}
    try:
        settings = Settings.from_env(**overrides)
    except ValueError as e:  # a value no setting accepts: a usage error, not a traceback
        p.error(str(e))
    if settings.workers > 1 and not args.no_ray:
        p.error("--workers is for --no-ray; under Ray Serve, --replicas sets the model replicas")
    try:
        if scaling_of(args) and args.no_ray:
            p.error("--min-replicas and --max-replicas are for Ray Serve, not --no-ray")
    except ValueError as e:
        p.error(str(e))
    return args, settings


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args, settings = parse_args(argv)
    try:
        ensure_free(settings.host, settings.port)
    except OSError as e:
        print(f"python -m server: cannot serve on {settings.host}:{settings.port}: {e.strerror}", file=sys.stderr)
        return 1
    from .document_store import DocumentStore
    from .glossary_store import GlossaryStore
    from .key_store import KeyStore
    from .sqlite_file import StoreError

    settings = replace(settings, key_store=str(Path(settings.key_store).resolve()))  # one file for every process
    try:  # created on first use; a damaged or read-only store stops us here
        for store, path in ((KeyStore, settings.key_store), (GlossaryStore, settings.key_store),
                            (DocumentStore, settings.documents_path)):
            store(path).close()
    except StoreError as e:
        print(f"python -m server: {e}", file=sys.stderr)
        return 1
    from model import CheckpointError, kernels_for, resolve_placement

    from .front import ModelRegistry

    try:
        # float16 on the CPU, int8 on a GPU: refused here
        device, dtype = resolve_placement(settings.device, settings.dtype)
        registry = ModelRegistry.from_paths(args.model)  # every model named resolves before anything starts
    except (CheckpointError, ValueError) as e:
        print(f"python -m server: {e}", file=sys.stderr)
        return 1
    logging.getLogger("server").info("serving %s on %s in %s%s%s", ", ".join(registry.entries), device, dtype,
                                     " (--dtype auto)" if settings.dtype == "auto" else "",
                                     f" ({kernels_for(dtype)})" if device == "cpu" else "")
    if args.no_ray:
        from .runtime.workers import serve

        return serve(registry, settings)
    from .runtime.ray_main import serve_with_ray

    return serve_with_ray(args, settings, registry)


if __name__ == "__main__":
    sys.exit(main())
