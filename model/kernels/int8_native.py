"""Our int8 product for CPUs without VNNI (int8_avx2.cpp), built with the machine's C++ compiler at its first use and
kept in a cache, so a later process loads it in milliseconds.

Where VNNI or AMX sum int8 products exactly in one instruction, oneDNN's kernels run (isa.int8_activation_range).
Below that, oneDNN's u8 × s8 AVX2 kernel took longer for one row than the float32 product (loadtests/README.md,
"A CPU with AVX2 only"), so ours runs: the same int32 sums and the same float epilogue, so the same numbers bit for
bit. Where it cannot build (no compiler, no AVX2 allowed), oneDNN's runs, and the log says so once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

from . import isa

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int8_avx2.cpp")
LIMIT = 64  # the largest activation magnitude whose vpmaddubsw pair sums stay exact (int8_avx2.cpp)
OWN = "ours (avx2)"
ONEDNN = "oneDNN"


def cache_dir() -> Path:
    """SEQ2SEQ_KERNEL_CACHE, else seq2seq-serve/kernels under XDG_CACHE_HOME (~/.cache)."""
    if os.environ.get("SEQ2SEQ_KERNEL_CACHE"):
        return Path(os.environ["SEQ2SEQ_KERNEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seq2seq-serve" / "kernels"


# -fopenmp: at::parallel_for is OpenMP pragmas in torch's headers (serial without it); the library's libgomp.so.1 is
# the one torch has loaded already, so one thread pool serves both. -ffp-contract=off: no FMA in the epilogue.
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-ffp-contract=off", "-std=c++17", "-w", "-fPIC", "-shared")


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def _compile_command(output: Path) -> list[str]:
    from torch.utils import cpp_extension  # imports setuptools: only when a build is needed

    return [_compiler(), *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *(f"-I{path}" for path in cpp_extension.include_paths()), str(SOURCE), "-o", str(output),
            *(f"-L{path}" for path in cpp_extension.library_paths()), "-lc10", "-ltorch_cpu"]


def _library() -> Path:
    """The built library: named by the source, torch's version, the compiler and its flags, built once under a lock
    (parallel test workers or replicas wait for the first)."""
    built_by = " ".join((torch.__version__, _compiler(), *FLAGS)).encode()
    key = hashlib.sha256(SOURCE.read_bytes() + built_by).hexdigest()[:16]
    directory = cache_dir()
    library = directory / f"int8_avx2-{key}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / f"{library.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not library.exists():
            with tempfile.TemporaryDirectory(dir=directory) as scratch:
                built = Path(scratch) / library.name
                log.info("building the int8 kernel for AVX2 (once; cached in %s)", directory)
                done = subprocess.run(_compile_command(built), capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise RuntimeError(done.stderr.strip()[-2000:] or f"exit status {done.returncode}")
                os.replace(built, library)  # whole or absent, for a process that does not take the lock
        lock_path.unlink(missing_ok=True)  # a process still waiting on it finds the library when it gets the lock
    return library


@lru_cache(maxsize=1)
def own_kernel() -> bool:
    """Whether Int8Linear runs our kernel in this process: where the CPU (or the cap) has AVX2 and no VNNI, once
    it has built and loaded."""
    if isa.int8_activation_range() > LIMIT or not isa.at_least("AVX2"):  # VNNI or AMX: oneDNN's sum exactly
        return False
    if shutil.which(_compiler()) is None:
        log.warning("int8: no C++ compiler (%s) to build our AVX2 kernel; oneDNN's runs, slower at a few rows",
                    _compiler())
        return False
    try:
        torch.ops.load_library(str(_library()))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        log.warning("int8: our AVX2 kernel did not build or load; oneDNN's runs, slower at a few rows: %s", e)
        return False
    return True


def pack(values: torch.Tensor) -> torch.Tensor:
    """int8 weights (N, K) in the kernel's layout, (⌈N/8⌉, ⌈K/4⌉, 8, 4): for each block of 8 columns, the 4 values
    of each column at each 4 k's in turn, so one 32-byte load meets one broadcast of 4 activations. Padded with
    zeros."""
    n, k = values.shape
    blocks, depth = -(-n // 8), -(-k // 4)
    padded = torch.zeros(blocks * 8, depth * 4, dtype=torch.int8)
    padded[:n, :k] = values
    return padded.view(blocks, 8, depth, 4).transpose(1, 2).contiguous()


def int8_products() -> str:
    """Whose int8 products this process runs, for logs and /v1/models."""
    return OWN if own_kernel() else ONEDNN
