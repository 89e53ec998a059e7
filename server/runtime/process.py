"""What every process that runs a model needs (a --no-ray worker, a Ray Serve replica, an engine process): the
device and dtype, torch threads, loading the weights, and the process's name."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import torch

from model import ModelBundle, load, resolve_placement

from ..settings import Settings

T = TypeVar("T")


def set_engine_threads(cpus: float, settings: Settings) -> int:
    """Torch intra-op threads for CPU engines given `cpus` cores: an engine's encoder and decoder threads run at
    once, a core each at most; more intra-op threads than cores make OpenMP spin-wait against the HTTP side and
    each other (loadtests/README.md, serving path)."""
    if resolve_placement(settings.device, settings.dtype)[0] != "cpu":
        return torch.get_num_threads()
    threads = max(1, int(cpus) // 2)
    torch.set_num_threads(threads)
    return threads


def in_passing_thread(build: Callable[[], T]) -> T:
    """build() in a thread that then exits: for loading a model and building its engine (the KV cache is
    allocated there).

    Why: on the CPU each thread that runs torch operators keeps an OpenMP team (intra-op threads − 1 workers) for as
    long as it lives. An engine runs operators in two threads, its decoder steps and its encoder passes; a third
    team living on beside theirs would make more OpenMP threads than cores (at intra-op threads = cores / 2), and
    libgomp then lets idle workers spin only briefly, so every operator waits for its team to wake up
    (tests/server/test_cpu_runtime.py counts the teams)."""
    with ThreadPoolExecutor(1, thread_name_prefix="model-load") as thread:
        return thread.submit(build).result()


def load_weights(path: str | None, settings: Settings) -> ModelBundle:
    """The model with its weights on the device and in the dtype the settings resolve to."""
    device, dtype = resolve_placement(settings.device, settings.dtype)
    return load(path, device=device, dtype=dtype, pack_tied_output=settings.pack_tied_output,
                traced=settings.traced)


def name_this_process(name: str) -> None:
    """The name ps and top show for this process (Linux; elsewhere it keeps its own)."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass
